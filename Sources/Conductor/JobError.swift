/// An error thrown by Conductor's throwing API, or one a job fails with (a ``RetryJob``'s invalid
/// attempt, a job refused its exclusivity category inside a group). Its description names the jobs
/// involved.
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
        /// its children). The first job is the refused one, the second its group (while both are
        /// alive: see ``JobError/jobs``).
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
    ///
    /// A `JobError` that a job fails with is kept as its outcome (and a group keeps its children's
    /// failures), and it may name that job or its group: kept, it holds its jobs weakly, so that it
    /// keeps none of them alive, and `jobs` lists those still alive, in order; the positions above
    /// hold while all of them are alive. Its description names all of them, as they were named
    /// when the job failed. (An error of another type that wraps a `JobError` is kept as it is.)
    public var jobs: [Job] {
        switch storage {
        case .strong(let jobs): jobs
        case .weak(let references, _): references.compactMap(\.job)
        }
    }

    private enum Storage: Sendable {
        case strong([Job])
        case weak([_WeakJob], names: [String])
    }

    private let storage: Storage

    /// "'A' waits for 'B' waits for 'A'": the jobs of a cycle, each waiting for the next, named
    /// (`names` are quoted already), back to the first.
    static func _cycleText(_ names: [String]) -> String {
        (names + [names[0]]).joined(separator: " waits for ")
    }

    /// For `.alreadyStarted` and `.invalidAttempt`: what had happened to the job ("has already started", "has
    /// already finished", "was cancelled before it started"), captured when the error was thrown.
    /// For `.dependencyCycle`: why a cycle through a group is one, which its edges do not show.
    private let situation: String?

    /// An error as thrown: it holds `jobs`.
    init(code: Code, jobs: [Job], situation: String? = nil) {
        self.init(code: code, storage: .strong(jobs), situation: situation)
    }

    private init(code: Code, storage: Storage, situation: String?) {
        self.code = code
        self.storage = storage
        self.situation = situation
    }

    /// The error as a job keeps it as its outcome: holding its jobs weakly, with their names now.
    /// Call with `engineLock` held.
    func _keptLocked() -> JobError {
        guard case .strong(let jobs) = storage else { return self }
        let names = jobs.map(\._describeLocked)
        return JobError(code: code, storage: .weak(jobs.map(_WeakJob.init), names: names), situation: situation)
    }

    public var description: String {
        let names: [String]
        switch storage {
        case .strong(let jobs): names = jobs.map { "'\($0.displayName)'" }
        case .weak(_, let captured): names = captured.map { "'\($0)'" }
        }
        switch code {
        case .dependencyCycle:
            if names.count == 1 {
                return "JobError.dependencyCycle: \(names[0]) cannot depend on itself"
            }
            let chain = JobError._cycleText(names)
            let why = situation.map { " (\($0))" } ?? ""
            return "JobError.dependencyCycle: refused; the dependency would close the cycle \(chain)\(why)"
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
