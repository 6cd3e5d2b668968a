/// Stops the program with `message`, in every build configuration.
///
/// Every trap in Conductor goes through this function or ``_require(_:_:file:line:)``. The
/// standard library's `precondition` and `preconditionFailure` drop their message under `-O`, so a
/// user's release build, which is what ships, would print only "precondition failure" for a misuse
/// that a debug build explains. `fatalError` keeps its message at every optimization level.
///
/// `package` so that ConductorFoundation traps the same way.
///
/// The message is an autoclosure so that building it stays out of line: an interpolated message at a
/// call site on a hot path would otherwise grow the caller and keep it from being inlined
/// (measured: `JobQueue.addJob` stopped being inlined into its callers, about 57 instructions a job).
@inline(never)
package func _trap(
    _ message: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line
) -> Never {
    fatalError(message(), file: file, line: line)
}

/// Traps with `message` unless `condition` holds; the message survives release builds (see `_trap`).
///
/// The message is built only when the check fails, so a passing check costs one branch.
@inline(__always)
package func _require(
    _ condition: Bool, _ message: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line
) {
    if !condition {
        _trap(message(), file: file, line: line)
    }
}
