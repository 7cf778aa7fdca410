//! What a result records about its run, without a GPU.

use convkit::harness::report::{COMMIT, utc};

#[test]
fn unix_seconds_become_utc_dates() {
    assert_eq!(utc(0), "1970-01-01T00:00:00");
    assert_eq!(utc(951_782_400), "2000-02-29T00:00:00");
    assert_eq!(utc(1_796_083_200 + 3_723), "2026-12-01T01:02:03");
}

#[test]
fn the_build_knows_its_commit() {
    // A 12-digit hash, optionally `-dirty`; `unknown` only outside a git checkout.
    let hash = COMMIT.trim_end_matches("-dirty");
    assert!(COMMIT == "unknown" || (hash.len() == 12 && hash.chars().all(|c| c.is_ascii_hexdigit())), "{COMMIT}");
}
