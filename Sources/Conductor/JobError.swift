/// An error thrown by Conductor's throwing API. Its description names the jobs involved.
///
/// Misuse that cannot be expressed as a thrown error (the non-throwing `JobQueue.addJob(_:)`, for
/// example) traps instead; `Docs/Concepts.md` lists every case and whether it throws or traps.
public struct JobError: Error, Sendable, CustomStringConvertible {
    /// What went wrong. New codes may be added in later versions, so switch with a `default` case.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: Hashable, Sendable {
            case dependencyCycle
            case alreadyStarted
        }

        private let value: Value

        /// Adding the dependency would make a job wait, directly or through other jobs, for itself.
        public static let dependencyCycle = Code(value: .dependencyCycle)
        /// The dependent job has already started or finished, so a new dependency cannot hold it back.
        public static let alreadyStarted = Code(value: .alreadyStarted)

        public var description: String {
            switch value {
            case .dependencyCycle: "dependencyCycle"
            case .alreadyStarted: "alreadyStarted"
            }
        }
    }

    /// What went wrong.
    public let code: Code

    /// The jobs involved. For `.dependencyCycle` these are the jobs on the cycle, starting with the
    /// job that would have gained the dependency; each job waits for the next, and the last waits for the first.
    public let jobs: [Job]

    public var description: String {
        let names = jobs.map { "'\($0.displayName)'" }
        switch code {
        case .dependencyCycle:
            if jobs.count == 1 {
                return "JobError.dependencyCycle: \(names[0]) cannot depend on itself"
            }
            let chain = (names + [names[0]]).joined(separator: " waits for ")
            return "JobError.dependencyCycle: refused; the dependency would close the cycle \(chain)"
        case .alreadyStarted:
            return
                "JobError.alreadyStarted: \(names[0]) has already started, so it cannot gain the dependency \(names.dropFirst().joined(separator: ", "))"
        default:
            return "JobError.\(code): \(names.joined(separator: ", "))"
        }
    }
}
