//! The one way the property tests run a property (`tests/it/properties.rs`,
//! `tests/it/shares.rs`): a fixed number of cases, no failure files.

use proptest::strategy::Strategy;
use proptest::test_runner::{Config as PtConfig, TestCaseError, TestRunner};

/// Runs `test` on `cases` values of `strategy`, printing the count first.
pub fn check<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    println!("property {name}: {cases} cases");
    let config = PtConfig {
        cases,
        failure_persistence: None,
        ..PtConfig::default()
    };
    if let Err(e) = TestRunner::new(config).run(&strategy, test) {
        panic!("property {name}: {e}");
    }
}
