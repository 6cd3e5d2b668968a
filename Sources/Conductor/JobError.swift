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
            case invalidAttempt
            case categoryNotHeldByGroup
        }

        private let value: Value

        /// Adding the dependency would make a job wait, directly or through other jobs, for itself.
        public static let dependencyCycle = Code(value: .dependencyCycle)
        /// The dependent job has already started, finished, or been cancelled, so a new dependency
        /// cannot hold it back.
        public static let alreadyStarted = Code(value: .alreadyStarted)
        /// A ``RetryJob``'s `makeAttempt` returned a job it cannot start: one on a queue, already
        /// started or finished, waiting for dependencies, or with exclusivity categories. The retry job fails with this error,
        /// and the job returned is left alone.
        public static let invalidAttempt = Code(value: .invalidAttempt)
        /// A job inside a ``GroupJob`` named an exclusivity category that no group around it holds.
        /// It would wait for that category while its group holds a slot (and its own categories)
        /// waiting for it, which can deadlock against a job that waits for that slot or wants both
        /// categories, so the job fails with this error instead of running (a group first cancels
        /// its children). The first job is the refused one, the second its group.
        public static let categoryNotHeldByGroup = Code(value: .categoryNotHeldByGroup)

        public var description: String {
            switch value {
            case .dependencyCycle: "dependencyCycle"
            case .alreadyStarted: "alreadyStarted"
            case .invalidAttempt: "invalidAttempt"
            case .categoryNotHeldByGroup: "categoryNotHeldByGroup"
            }
        }
    }

    /// What went wrong.
    public let code: Code

    /// The jobs involved. For `.dependencyCycle` these are the jobs on the cycle, starting with the
    /// job that would have gained the dependency; each job waits for the next, and the last waits for the first.
    public let jobs: [Job]

    /// For `.alreadyStarted` and `.invalidAttempt`: what had happened to the job ("has already started", "has
    /// already finished", "was cancelled before it started"), captured when the error was thrown.
    private let situation: String?

    init(code: Code, jobs: [Job], situation: String? = nil) {
        self.code = code
        self.jobs = jobs
        self.situation = situation
    }

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
                "JobError.alreadyStarted: \(names[0]) \(situation ?? "has already started"), so it cannot gain the dependency \(names.dropFirst().joined(separator: ", "))"
        case .invalidAttempt:
            return
                "JobError.invalidAttempt: \(names[0]) cannot start its attempt \(names.dropFirst().joined(separator: ", ")), which \(situation ?? "cannot be started"); return a new job that is on no queue and waits for nothing"
        case .categoryNotHeldByGroup:
            return
                "JobError.categoryNotHeldByGroup: \(names[0]) \(situation ?? "names an exclusivity category that") its group \(names[1]) does not hold; inside a group a job may name only categories a group around it holds, so it did not run"
        default:
            return "JobError.\(code): \(names.joined(separator: ", "))"
        }
    }
}
