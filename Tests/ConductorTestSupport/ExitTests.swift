import Testing

/// The standard error an exit test observed (`observing: [\.standardErrorContent]`), as text; empty
/// when the exit test did not run or did not observe it. Blocks no thread.
package func standardErrorText(_ result: ExitTest.Result?) -> String {
    String(decoding: result?.standardErrorContent ?? [], as: UTF8.self)
}
