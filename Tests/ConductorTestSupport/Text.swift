import Testing

/// Expects `text` to contain each of `parts`, recording the whole text when one is missing (for
/// the diagnostics tests, whose texts are long).
package func expectText(
    _ text: String, contains parts: [String], sourceLocation: SourceLocation = #_sourceLocation
) {
    for part in parts where !text.contains(part) {
        Issue.record("missing \"\(part)\" in:\n\(text)", sourceLocation: sourceLocation)
    }
}
