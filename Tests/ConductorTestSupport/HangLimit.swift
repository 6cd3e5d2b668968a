import Testing

extension Trait where Self == TimeLimitTrait {
    /// The time limit of a test that would hang, not fail, if the engine had a bug: a wait that
    /// never returns, an exit test whose trap never comes, a race that deadlocks.
    ///
    /// It breaks a hang; it does not time anything. Swift Testing starts the whole suite at once, so
    /// a test's clock also counts the time it waits for a thread while hundreds of others run, and
    /// on two loaded cores that is most of it: a run of the suite three times slower than on an
    /// idle machine took four minutes for a race test that takes twenty seconds there. Ten minutes
    /// stays far above that, and below the CI watchdog's budget for the whole run
    /// (Docs/Reliability.md, "CI"), so that a hang is still reported by the test's name.
    package static var hangLimit: Self { .timeLimit(.minutes(10)) }
}
