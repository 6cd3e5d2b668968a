/// One mutual-exclusivity category: the job holding it, and the jobs waiting for it, first come
/// first served. Guarded by `engineLock` (so `@exclusivity(unchecked)`, like `Job`'s own).
final class _Category {
    let name: String
    /// The executing job that holds the category.
    @exclusivity(unchecked) var holder: Job?
    /// The jobs in line, from `head` on. An entry is live while its job's `parkTicket` is the
    /// entry's ticket; `dead` counts the entries past `head` that are not.
    @exclusivity(unchecked) var line: [(job: Job, ticket: UInt64)] = []
    @exclusivity(unchecked) var head = 0
    @exclusivity(unchecked) var dead = 0
    /// Whether the category is idle (nobody holds it or waits for it) and kept by the registry, and
    /// its neighbours in the registry's idle list, oldest first. Unowned: every idle category is in
    /// the registry's dictionary, which holds it, and leaves the list before it leaves the dictionary.
    @exclusivity(unchecked) var isIdle = false
    @exclusivity(unchecked) unowned(unsafe) var idleOlder: _Category?
    @exclusivity(unchecked) unowned(unsafe) var idleNewer: _Category?
    /// Whether the registry forgot the category: a job that named it looks its names up again
    /// before it next waits for or takes a category.
    @exclusivity(unchecked) var isForgotten = false

    init(name: String) {
        self.name = name
    }

    var isUnused: Bool { holder == nil && head == line.count }

    /// The first job in line, after dropping the entries of jobs that left it.
    func first() -> Job? {
        while head < line.count {
            let entry = line[head]
            if entry.job._extras?.parkTicket == entry.ticket {
                return entry.job
            }
            head += 1
            dead -= 1
        }
        return nil
    }

    /// Drops the consumed and dead entries once they are the larger part, handing them to
    /// `actions` to be released after unlocking. Amortized O(1) per entry.
    func compact(_ actions: inout _Actions) {
        guard head + dead > 16, (head + dead) * 2 > line.count else { return }
        var kept: [(job: Job, ticket: UInt64)] = []
        kept.reserveCapacity(line.count - head - dead)
        var dropped: [Job] = []
        dropped.reserveCapacity(head + dead)
        for (index, entry) in line.enumerated() {
            if index >= head && entry.job._extras?.parkTicket == entry.ticket {
                kept.append(entry)
            } else {
                dropped.append(entry.job)
            }
        }
        line = kept
        head = 0
        dead = 0
        actions.release(dropped)
    }
}

/// The categories a job is in line for or holds: the first inline, any others in an array, so that
/// a job of one category allocates nothing to keep it.
struct _CategoryList {
    private var first: _Category?
    private var rest: [_Category] = []

    mutating func append(_ category: _Category) {
        if first == nil {
            first = category
        } else {
            rest.append(category)
        }
    }

    /// Calls `body` with each category, in order.
    @inline(__always)
    func forEach(_ body: (_Category) -> Void) {
        guard let first else { return }
        body(first)
        for category in rest {
            body(category)
        }
    }

    /// Whether every category satisfies `predicate`, stopping at the first that does not.
    @inline(__always)
    func allSatisfy(_ predicate: (_Category) -> Bool) -> Bool {
        guard let first else { return true }
        guard predicate(first) else { return false }
        for category in rest where !predicate(category) {
            return false
        }
        return true
    }

    /// The categories in order, as an array: for diagnostics, which sort them and stop early.
    var array: [_Category] {
        guard let first else { return [] }
        return [first] + rest
    }
}

/// The process-wide exclusivity categories (``Job/exclusivityCategories``).
///
/// A job's categories are granted in the critical section in which its queue claims it with a free
/// slot, all of them or none: each must be free, and the job must be first in line for each (or no
/// job must be in line). Otherwise the job joins the line of every one of its categories at once,
/// leaves its slot, and waits (`_WaitReasons.exclusivity`). Because a job joins all its lines in one
/// step, any two jobs are in the same order in every line they share, so the lines form no cycle,
/// whatever order categories are named in. When a holder finishes, the first job in line is made
/// ready again once it is first in all its lines and they are all free; it keeps its place until its
/// queue claims it, so nobody overtakes it, and it never holds a category while it waits for a slot.
///
/// A job looks its categories up by name once, when it is claimed with them not yet its own, and
/// keeps the `_Category` objects (`_JobExtras.lineCategories`) until it lets them go, so that waiting,
/// waking, taking and letting go hash no strings. A category nobody holds or waits for is idle: the
/// registry keeps the `idleLimit` categories most recently idle, so that a category used again and
/// again is not made and forgotten each time, and forgets the one idle longest when another goes
/// idle beyond that. An idle category keeps no job.
// @unchecked Sendable: every stored property is guarded by `engineLock`, and so
// `@exclusivity(unchecked)`, like `Job`'s own.
final class _ExclusivityRegistry: @unchecked Sendable {
    /// How many idle categories the registry keeps at most.
    static let idleLimit = 64

    @exclusivity(unchecked) private var categories: [String: _Category] = [:]
    @exclusivity(unchecked) private var nextTicket: UInt64 = 0
    /// The idle categories, oldest first (linked through `_Category.idleNewer`), and how many.
    /// Unowned: `categories` holds them.
    @exclusivity(unchecked) private unowned(unsafe) var idleOldest: _Category?
    @exclusivity(unchecked) private unowned(unsafe) var idleNewest: _Category?
    @exclusivity(unchecked) private var idleCount = 0

    /// How many of `names` are in use: held, or with entries in line, even of jobs that left it
    /// (which the category keeps until it compacts its line or goes idle). For tests: were a
    /// category to go idle keeping entries (and so jobs), it would count.
    func inUseCountLocked(among names: [String]) -> Int {
        names.count { categories[$0].map { $0.holder != nil || !$0.line.isEmpty } ?? false }
    }

    /// How many of `names` the registry knows, idle or not. For tests.
    func knownCountLocked(among names: [String]) -> Int {
        names.count { categories[$0] != nil }
    }

    /// The category named `name`, made if the registry does not know it, and no longer idle: the
    /// caller is about to hold it or join its line. Call with `engineLock` held.
    private func resolveLocked(_ name: String) -> _Category {
        if let category = categories[name] {
            if category.isIdle {
                unlinkIdleLocked(category)
            }
            return category
        }
        let category = _Category(name: name)
        categories[name] = category
        return category
    }

    /// Whether `job` may take all of `lines` now. Call with `engineLock` held.
    @inline(__always)
    private func grantable(_ job: Job, _ lines: _CategoryList) -> Bool {
        lines.allSatisfy { category in
            guard category.holder == nil else { return false }
            guard let first = category.first() else { return true }
            return first === job
        }
    }

    /// Gives `job` its categories if it may have them now; otherwise puts it in line (if it is not
    /// already) and returns `false`. Called when its queue claims it with a free slot, or at
    /// `start()`. Call with `engineLock` held.
    func acquireLocked(_ job: Job, _ extras: _JobExtras, joinLine: Bool = true, _ actions: inout _Actions) -> Bool {
        let wasInLine = extras.parkTicket != 0
        if !wasInLine {
            if let group = job._countingGroupLocked {
                // A category held by an ancestor group counts as held by the job: it neither waits
                // for it nor takes it. Inside a group, only those: a group holds its slot (and its
                // categories) while it waits for its children, so a child waiting for a category
                // could wait for a job that waits for that slot. The job is granted nothing and
                // fails instead of running.
                let outside = (extras.exclusivityCategories ?? []).filter { !heldByAncestor($0, of: group) }
                var lines = _CategoryList()
                if job._joinedAsGeneratedDependency {
                    // Except a child's generated dependency, which waits in line for the others as
                    // it did outside the group before the group counted it (the same wait).
                    for name in outside {
                        lines.append(resolveLocked(name))
                    }
                } else if let name = outside.min() {
                    extras.lineCategories = lines
                    extras.categoryRefusal = (name, group)
                    job._runsElsewhere = true
                    return true
                }
                extras.lineCategories = lines
            } else {
                // In the set's order: any order is free of deadlock, since a job joins all its
                // lines at once. Dropping the references of an earlier claim (a job that left the
                // line) may free a forgotten category, which keeps no job.
                var lines = _CategoryList()
                for name in extras.exclusivityCategories ?? [] {
                    lines.append(resolveLocked(name))
                }
                extras.lineCategories = lines
            }
        }
        let lines = extras.lineCategories
        if grantable(job, lines) {
            lines.forEach { category in
                #if CONDUCTOR_INVARIANTS
                    _require(
                        !category.isIdle && !category.isForgotten,
                        "Conductor: exclusivity category '\(category.name)' granted while idle or forgotten")
                #endif
                if wasInLine {
                    // First in line (`grantable` checked it): leaving the line consumes its head.
                    _ = category.first()
                    category.head += 1
                    category.compact(&actions)
                }
                category.holder = job
            }
            extras.parkTicket = 0
            extras.exclusivityWoken = false
            extras.holdsCategories = true
            return true
        }
        guard joinLine else { return false }
        if !wasInLine {
            nextTicket &+= 1
            extras.parkTicket = nextTicket
            let ticket = nextTicket
            lines.forEach { $0.line.append((job, ticket)) }
        }
        extras.exclusivityWoken = false
        return false
    }

    /// `job` finished, or stopped waiting in line (it gained a dependency or a condition, or its
    /// categories changed): lets its categories go, or takes it out of line, and makes ready the
    /// jobs whose turn it is now. Call with `engineLock` held.
    func leaveLocked(_ job: Job, _ extras: _JobExtras, _ actions: inout _Actions) {
        let lines = extras.lineCategories
        if extras.holdsCategories {
            extras.holdsCategories = false
            lines.forEach { $0.holder = nil }
        } else if extras.parkTicket != 0 {
            extras.parkTicket = 0
            extras.exclusivityWoken = false
            lines.forEach { $0.dead += 1 }
        } else {
            return
        }
        wakeFirstInLineLocked(lines, &actions)
    }

    /// For each of `lines`, makes the first job in line ready if all its categories are now its
    /// turn, and counts the categories nobody uses as idle. Call with `engineLock` held.
    private func wakeFirstInLineLocked(_ lines: _CategoryList, _ actions: inout _Actions) {
        lines.forEach { category in
            if let first = category.first(), let firstExtras = first._extras, !firstExtras.exclusivityWoken,
                grantable(first, firstExtras.lineCategories)
            {
                firstExtras.exclusivityWoken = true
                first._carryOut(first._lifecycle.exclusivityCleared(), &actions)
            }
            category.compact(&actions)
            if category.isUnused {
                idleLocked(category, &actions)
            }
        }
    }

    /// `category` is unused: it drops its line's entries (released after unlocking) and becomes the
    /// newest idle category; beyond `idleLimit`, the oldest is forgotten. O(1). Call with
    /// `engineLock` held.
    private func idleLocked(_ category: _Category, _ actions: inout _Actions) {
        if !category.line.isEmpty {
            actions.releaseAfterUnlocking(category.line)
            category.line = []
            category.head = 0
            category.dead = 0
        }
        guard !category.isIdle, !category.isForgotten else { return }
        category.isIdle = true
        category.idleOlder = idleNewest
        if let newest = idleNewest {
            newest.idleNewer = category
        } else {
            idleOldest = category
        }
        idleNewest = category
        idleCount += 1
        if idleCount > Self.idleLimit, let oldest = idleOldest {
            unlinkIdleLocked(oldest)
            oldest.isForgotten = true
            // May free it, here: an idle category holds no job, and a `_Category` runs no user code.
            categories[oldest.name] = nil
        }
        #if CONDUCTOR_INVARIANTS
            checkIdleListLocked()
        #endif
    }

    /// Takes `category` out of the idle list: it is about to be used, or forgotten.
    private func unlinkIdleLocked(_ category: _Category) {
        if let older = category.idleOlder {
            older.idleNewer = category.idleNewer
        } else {
            idleOldest = category.idleNewer
        }
        if let newer = category.idleNewer {
            newer.idleOlder = category.idleOlder
        } else {
            idleNewest = category.idleOlder
        }
        category.idleOlder = nil
        category.idleNewer = nil
        category.isIdle = false
        idleCount -= 1
    }

    #if CONDUCTOR_INVARIANTS
        /// The idle list holds `idleCount` categories, at most `idleLimit`, each idle, known and
        /// keeping no job. O(`idleLimit`).
        private func checkIdleListLocked() {
            var count = 0
            var next = idleOldest
            while let category = next {
                _require(
                    category.isIdle && !category.isForgotten && category.holder == nil && category.line.isEmpty
                        && categories[category.name] === category,
                    "Conductor: idle exclusivity category '\(category.name)' is in use or unknown")
                count += 1
                next = category.idleNewer
            }
            _require(
                count == idleCount && count <= Self.idleLimit,
                "Conductor: \(count) idle exclusivity categories listed, \(idleCount) counted")
        }
    #endif

    /// Whether `group` or a group around it (at any depth) holds `name`. Each group around holds
    /// its slot while its children run, so it is on its own group's queue of children, through
    /// which it finds that group.
    private func heldByAncestor(_ name: String, of group: GroupJob) -> Bool {
        guard let holder = categories[name]?.holder else { return false }
        var ancestor: GroupJob? = group
        while let current = ancestor {
            if current === holder { return true }
            ancestor = current._countingGroupLocked
        }
        return false
    }

    /// Why `names` cannot all be taken now, for messages: the first one (by name) held or with a
    /// line. Call with `engineLock` held.
    func obstacleLocked(_ names: Set<String>) -> String {
        for name in names.sorted() {
            guard let category = categories[name] else { continue }
            if let holder = category.holder {
                return "its exclusivity category '\(name)' is held by '\(holder._describeLocked)'"
            }
            if let first = category.first() {
                return "'\(first._describeLocked)' is waiting for its exclusivity category '\(name)'"
            }
        }
        return "its exclusivity categories are taken"
    }
}

/// The one registry of exclusivity categories.
let _exclusivity = _ExclusivityRegistry()

extension JobQueue {
    /// How many of the exclusivity categories `names` are in use (held, or with jobs in line). For
    /// tests: 0 once every job that named one has finished.
    package static func _exclusivityCategoriesInUse(among names: [String]) -> Int {
        engineLock.withLock { _exclusivity.inUseCountLocked(among: names) }
    }

    /// How many of the exclusivity categories `names` the registry knows, idle ones included. For
    /// tests: at most `_exclusivityIdleLimit` once no job holds or waits for one.
    package static func _exclusivityCategoriesKnown(among names: [String]) -> Int {
        engineLock.withLock { _exclusivity.knownCountLocked(among: names) }
    }

    /// How many idle exclusivity categories the registry keeps at most. For tests.
    package static var _exclusivityIdleLimit: Int { _ExclusivityRegistry.idleLimit }
}

extension Job {
    /// The names of the mutual-exclusivity categories the job belongs to: two jobs that share one
    /// never execute at the same time, on any queues.
    ///
    /// Categories are granted together with the job's slot, when its queue claims it: all of them
    /// or none, first come first served per category. If one is taken, the job waits in line for
    /// it (it is `pending` meanwhile) and its slot goes to other work; when its turn comes it is
    /// ready again and keeps its place in line until its queue claims it. A job never holds a
    /// category while it waits for a slot, and the order in which categories are named cannot
    /// deadlock. A job that gains a dependency or a condition while in line leaves the line, and
    /// joins it again at the back when it is claimed next.
    ///
    /// Inside a ``GroupJob``, a job may name only categories a group around it holds (it shares
    /// them); one that names another fails with
    /// ``JobError/Code/categoryNotHeldByGroup`` when claimed, without running.
    ///
    /// Set it before the job starts; setting it on a started job traps, and on a job cancelled
    /// before it started it has no effect. ``start()`` by hand takes the categories if they are
    /// free and nobody is in line for them, and traps otherwise.
    ///
    /// Names are looked up when the job's queue claims it (or ``start()`` starts it) while it is not
    /// in line: the first time, and again after it left a line. Categories nobody holds or waits
    /// for are kept, the 64 most recently used, for the next job that names them; a process that
    /// names ever new categories does not grow.
    ///
    /// - Complexity: Claiming and finishing are O(categories), amortized.
    public var exclusivityCategories: Set<String> {
        get { engineLock.withLock { _extras?.exclusivityCategories ?? [] } }
        set {
            var actions = _Actions()
            engineLock.lock()
            guard _isUnstartedLocked("Job.exclusivityCategories", "set its categories") else { return }
            if newValue.isEmpty && !_isExclusive {
                engineLock.unlock()
                return
            }
            let extras = _extrasLocked
            _leaveExclusivityLineLocked(extras, &actions)
            extras.exclusivityCategories = newValue.isEmpty ? nil : newValue
            _isExclusive = !newValue.isEmpty
            actions.planWorkersLocked()
            engineLock.unlock()
            actions.perform()
        }
    }

    /// Takes the job's categories as its queue claims it; if they are taken, the job waits in line
    /// (`ready → pending`) and `false` is returned. Call with `engineLock` held.
    func _takeCategoriesLocked(_ actions: inout _Actions) -> Bool {
        if _exclusivity.acquireLocked(self, _extras!, &actions) {
            return true
        }
        _lifecycle.exclusivityWaitBegan()
        return false
    }

    /// The job, unstarted, gains another reason to wait (or new categories): if it is in line for
    /// its categories, it leaves the line, so that nobody waits behind a job that is not about to
    /// run. Call with `engineLock` held.
    func _leaveExclusivityLineLocked(_ extras: _JobExtras, _ actions: inout _Actions) {
        guard extras.parkTicket != 0 else { return }
        _exclusivity.leaveLocked(self, extras, &actions)
        if _lifecycle.waits.exclusivity != 0 {
            _carryOut(_lifecycle.exclusivityCleared(), &actions)
        }
    }
}
