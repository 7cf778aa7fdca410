//! The tests that need the measuring harness require the `harness` feature, and cargo leaves
//! a target whose features are missing out without a word: this one fails instead.

#[test]
#[allow(clippy::assertions_on_constants)] // a run-time failure that says what to do
fn tests_run_with_the_harness_feature() {
    assert!(
        cfg!(feature = "harness"),
        "run the tests with `--features harness` (as scripts/test does): without it the reference, \
         bound, timing and GPU tests are not even built"
    );
}
