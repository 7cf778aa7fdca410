//! The built-in layer suites: the files in `benches/suites/`, embedded.

use crate::{Conv2d, Error, Result, problem::parse_suite};

/// Built-in suites, by name.
pub const SUITES: &[(&str, &str)] = &[
    ("default", include_str!("../../benches/suites/default.txt")),
    ("smoke", include_str!("../../benches/suites/smoke.txt")),
    ("large", include_str!("../../benches/suites/large.txt")),
    ("large-kernel", include_str!("../../benches/suites/large-kernel.txt")),
    ("depthwise", include_str!("../../benches/suites/depthwise.txt")),
    ("grouped", include_str!("../../benches/suites/grouped.txt")),
    ("grouped-nhwc", include_str!("../../benches/suites/grouped-nhwc.txt")),
    // Small layers that run every variant of a family, for compute-sanitizer.
    ("sanitize-depthwise", include_str!("../../benches/suites/sanitize-depthwise.txt")),
    ("sanitize-grouped", include_str!("../../benches/suites/sanitize-grouped.txt")),
];

/// A built-in suite by name, else a suite file by path.
pub fn load_suite(name_or_path: &str) -> Result<Vec<Conv2d>> {
    if let Some((_, text)) = SUITES.iter().find(|(name, _)| *name == name_or_path) {
        return parse_suite(text);
    }
    let text = std::fs::read_to_string(name_or_path).map_err(|e| {
        let names: Vec<_> = SUITES.iter().map(|(n, _)| *n).collect();
        Error::Io { path: format!("suite `{name_or_path}` (built-in suites: {})", names.join(", ")), source: e }
    })?;
    parse_suite(&text)
}
