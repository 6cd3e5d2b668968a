#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Progress and errors go to standard error, so that `--json` and `--markdown` output stays clean.
enum Console {
    static func progress(_ line: String) {
        let text = line + "\n"
        _ = text.utf8CString.withUnsafeBufferPointer { buffer in
            write(STDERR_FILENO, buffer.baseAddress, buffer.count - 1)
        }
    }
}
