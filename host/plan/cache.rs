//! The persistent plan cache: what Find measured, kept across runs in one JSON file.
//!
//! The file is `$CONVKIT_PLAN_CACHE` if set, else `$XDG_CACHE_HOME/convkit/plans.json`, else
//! `~/.cache/convkit/plans.json`. An entry counts only for the same GPU model and compute
//! capability, driver, cuDNN and convkit build (version and commit), and the same layer: shape,
//! layout, element type, math class and epilogue. Writes go to a temporary file that is then
//! renamed over the old one, so a reader never sees half a file; entries other processes wrote
//! meanwhile are merged in first. A file that is not valid JSON, not a convkit plan cache, or of
//! another format version is ignored with one warning and never overwritten (so a foreign file
//! at that path is safe); an entry that names an algorithm this build does not have is skipped.

use super::{Choice, Origin};
use crate::{
    Conv2d, Error, Gpu, Result, TensorLayout,
    conv::{cudnn::MathClass, epilogue::Epilogue},
};
use serde::{Deserialize, Serialize};
use std::{
    collections::HashMap,
    io::Write,
    path::{Path, PathBuf},
};

/// The `format` field of a plan cache file.
pub const FORMAT: &str = "convkit-plan-cache";
/// The version of its layout; a file of another version is ignored.
pub const VERSION: u32 = 1;
/// The environment variable that names the file.
pub const ENV: &str = "CONVKIT_PLAN_CACHE";

/// Where the cache lives by default (`None` without `$HOME` and the variables above).
pub fn default_path() -> Option<PathBuf> {
    path_from(|name| std::env::var_os(name))
}

/// [`default_path`] with the environment as a function (for tests).
pub fn path_from(env: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    let set = |name: &str| env(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(file) = set(ENV) {
        return Some(file);
    }
    let base = set("XDG_CACHE_HOME").or_else(|| set("HOME").map(|home| home.join(".cache")))?;
    Some(base.join("convkit").join("plans.json"))
}

/// Everything about the machine and the build that a measured choice depends on.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceKey {
    pub gpu: String,
    /// Compute capability x 10.
    pub arch: u32,
    /// The driver's CUDA version.
    pub driver: i32,
    /// cuDNN's version (0 where it could not be loaded).
    pub cudnn: usize,
    /// convkit's version and commit.
    pub convkit: String,
}

impl DeviceKey {
    pub fn of(gpu: &Gpu) -> Result<Self> {
        Ok(DeviceKey {
            gpu: gpu.name()?,
            arch: gpu.arch(),
            driver: gpu.driver_version()?,
            cudnn: crate::conv::cudnn::version().unwrap_or(0),
            convkit: build_id().to_owned(),
        })
    }
}

/// This build: `version+commit`.
pub fn build_id() -> &'static str {
    concat!(env!("CARGO_PKG_VERSION"), "+", env!("CONVKIT_COMMIT"))
}

/// The layer part of a key: the shape without its label, the layout, element type, math class
/// and epilogue (NCHW and f32 are all that exist today; they are in the key so that entries
/// stay apart when more do). A plain layer's key ends in `epilogue=none`.
pub fn layer_key(conv: &Conv2d, math: MathClass, epilogue: &Epilogue) -> String {
    let shape = Conv2d { name: None, layout: TensorLayout::Nchw, ..conv.clone() };
    format!("{shape};layout={};dtype=f32;math={};epilogue={epilogue}", conv.layout.name(), math.name())
}

/// One measured decision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheEntry {
    pub device: DeviceKey,
    pub layer: String,
    /// The algorithm's text form ([`crate::conv::Algorithm`]).
    pub algorithm: String,
    pub workspace: usize,
    pub time_ms: Option<f64>,
}

impl CacheEntry {
    pub fn new(device: &DeviceKey, layer: &str, choice: &Choice) -> Self {
        CacheEntry {
            device: device.clone(),
            layer: layer.to_owned(),
            algorithm: choice.algorithm.to_string(),
            workspace: choice.workspace,
            time_ms: choice.time_ms,
        }
    }

    /// The entry as a choice; `None` where this build does not know its algorithm.
    pub fn choice(&self) -> Option<Choice> {
        let algorithm = self.algorithm.parse().ok()?;
        let time = self.time_ms.map_or(String::new(), |ms| format!(" ({ms:.4} ms)"));
        Some(Choice {
            algorithm,
            workspace: self.workspace,
            origin: Origin::CacheFile,
            reason: format!("measured fastest by an earlier Find{time}"),
            time_ms: self.time_ms,
        })
    }
}

/// The file's contents.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct CacheDocument {
    pub format: String,
    pub version: u32,
    pub entries: Vec<CacheEntry>,
}

impl CacheDocument {
    fn empty() -> Self {
        CacheDocument { format: FORMAT.to_owned(), version: VERSION, entries: Vec::new() }
    }

    /// Parses a file's text: the document, or why it is not a current plan cache.
    pub fn parse(text: &str) -> std::result::Result<Self, String> {
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON ({e})"))?;
        if value.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
            return Err(format!("not a convkit plan cache (no \"format\": \"{FORMAT}\")"));
        }
        let version = value.get("version").and_then(|v| v.as_u64());
        if version != Some(VERSION as u64) {
            return Err(format!("format version {version:?}, this build reads version {VERSION}"));
        }
        serde_json::from_value(value).map_err(|e| format!("a malformed plan cache ({e})"))
    }

    fn find(&self, device: &DeviceKey, layer: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.device == *device && e.layer == layer)
    }
}

/// The cache file and its entries in memory.
#[derive(Debug)]
pub struct CacheFile {
    path: Option<PathBuf>,
    doc: CacheDocument,
    /// Each entry's position by (device, layer): a decision from the file is a hash lookup.
    index: HashMap<(DeviceKey, String), usize>,
    /// Why the file is ignored (then it is never written either).
    warning: Option<String>,
}

impl CacheFile {
    /// Reads `path` (a missing file is an empty cache; `None` keeps the cache in memory).
    pub fn open(path: Option<PathBuf>) -> Self {
        let (doc, warning) = match &path {
            None => (CacheDocument::empty(), None),
            Some(path) => match read(path) {
                Ok(doc) => (doc, None),
                Err(why) => {
                    (CacheDocument::empty(), Some(format!("ignoring the plan cache {}: {why}", path.display())))
                }
            },
        };
        let mut file = CacheFile { path, doc, index: HashMap::new(), warning };
        file.reindex();
        file
    }

    fn reindex(&mut self) {
        let keys = self.doc.entries.iter().enumerate().map(|(i, e)| ((e.device.clone(), e.layer.clone()), i));
        self.index = keys.collect();
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn warning(&self) -> Option<&str> {
        self.warning.as_deref()
    }

    pub fn entries(&self) -> &[CacheEntry] {
        &self.doc.entries
    }

    pub fn get(&self, device: &DeviceKey, layer: &str) -> Option<&CacheEntry> {
        // The tuple key needs owned parts; a layer key is a short string.
        self.index.get(&(device.clone(), layer.to_owned())).map(|&i| &self.doc.entries[i])
    }

    /// Adds or replaces an entry and writes the file.
    pub fn insert(&mut self, entry: CacheEntry) -> Result<()> {
        match self.doc.find(&entry.device, &entry.layer) {
            Some(i) => self.doc.entries[i] = entry.clone(),
            None => self.doc.entries.push(entry.clone()),
        }
        self.reindex();
        self.write(Some(entry), None)
    }

    /// Drops an entry (one that no longer builds) and writes the file.
    pub fn remove(&mut self, device: &DeviceKey, layer: &str) {
        if let Some(i) = self.doc.find(device, layer) {
            self.doc.entries.remove(i);
            self.reindex();
            if let Err(e) = self.write(None, Some((device, layer))) {
                eprintln!("convkit: warning: the plan cache was not written: {e}");
            }
        }
    }

    /// Merges what is on disk now with this change and replaces the file atomically.
    fn write(&mut self, added: Option<CacheEntry>, removed: Option<(&DeviceKey, &str)>) -> Result<()> {
        let (Some(path), None) = (&self.path, &self.warning) else {
            return Ok(());
        };
        let io = |source| Error::Io { path: path.display().to_string(), source };
        // Never replace what is not (or no longer) a plan cache.
        let mut doc = read(path).map_err(|why| io(std::io::Error::other(why)))?;
        if let Some((device, layer)) = removed {
            doc.entries.retain(|e| !(e.device == *device && e.layer == layer));
        }
        if let Some(entry) = added {
            match doc.find(&entry.device, &entry.layer) {
                Some(i) => doc.entries[i] = entry,
                None => doc.entries.push(entry),
            }
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let text = serde_json::to_string_pretty(&doc).expect("a plan cache serialises");
        let temp = path.with_extension(format!("json.{}.tmp", std::process::id()));
        let written = std::fs::File::create(&temp).and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.sync_all()
        });
        written.and_then(|()| std::fs::rename(&temp, path)).map_err(|e| {
            std::fs::remove_file(&temp).ok();
            io(e)
        })?;
        self.doc = doc;
        self.reindex();
        Ok(())
    }
}

/// A file's document; a missing file is an empty one.
fn read(path: &Path) -> std::result::Result<CacheDocument, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => CacheDocument::parse(&text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(CacheDocument::empty()),
        Err(e) => Err(format!("unreadable ({e})")),
    }
}
