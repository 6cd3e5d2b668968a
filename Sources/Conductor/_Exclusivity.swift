/// One mutual-exclusivity category: the job holding it, and the jobs waiting for it, first come
/// first served. Guarded by `engineLock` (so `@exclusivity(unchecked)`, like `Job`'s own).
final class _Category {
    /// The executing job that holds the category.
    @exclusivity(unchecked) var holder: Job?
    /// The jobs in line, from `head` on. An entry is live while its job's `parkTicket` is the
    /// entry's ticket; `dead` counts the entries past `head` that are not.
    @exclusivity(unchecked) var line: [(job: Job, ticket: UInt64)] = []
    @exclusivity(unchecked) var head = 0
    @exclusivity(unchecked) var dead = 0

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
// @unchecked Sendable: every stored property is guarded by `engineLock`, and so
// `@exclusivity(unchecked)`, like `Job`'s own.
final class _ExclusivityRegistry: @unchecked Sendable {
    @exclusivity(unchecked) private var categories: [String: _Category] = [:]
    @exclusivity(unchecked) private var nextTicket: UInt64 = 0

    /// How many of `names` are in use (held or with a line). For tests.
    func inUseCountLocked(among names: [String]) -> Int {
        names.count { categories[$0] != nil }
    }

    /// Whether `job` may take all its categories now. Call with `engineLock` held.
    private func grantable(_ job: Job, _ names: [String]) -> Bool {
        for name in names {
            guard let category = categories[name] else { continue }
            if category.holder != nil { return false }
            if let first = category.first(), first !== job { return false }
        }
        return true
    }

    /// Gives `job` its categories if it may have them now; otherwise puts it in line (if it is not
    /// already) and returns `false`. Called when its queue claims it with a free slot, or at
    /// `start()`. Call with `engineLock` held.
    func acquireLocked(_ job: Job, _ extras: _JobExtras, joinLine: Bool = true, _ actions: inout _Actions) -> Bool {
        // A category held by an ancestor group counts as held by the job: it neither waits for it
        // nor takes it.
        let names =
            extras.parkTicket != 0
            ? extras.lineCategories : extras.exclusivityCategories.filter { !heldByAncestor($0, of: extras) }
        if extras.parkTicket == 0, let name = names.first, let group = extras.parentGroup {
            // Inside a group, only the categories a group around it holds: a group holds its slot
            // (and its categories) while it waits for its children, so a child waiting for a
            // category could wait for a job that waits for that slot. The job is granted nothing
            // and fails instead of running.
            extras.categoryRefusal = (name, group)
            extras.lineCategories = []
            job._runsElsewhere = true
            return true
        }
        extras.lineCategories = names
        if grantable(job, names) {
            let wasInLine = extras.parkTicket != 0
            for name in names {
                let category = categories[name] ?? _Category()
                if categories[name] == nil { categories[name] = category }
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
        if extras.parkTicket == 0 {
            nextTicket &+= 1
            extras.parkTicket = nextTicket
            for name in names {
                let category = categories[name] ?? _Category()
                if categories[name] == nil { categories[name] = category }
                category.line.append((job, nextTicket))
            }
        }
        extras.exclusivityWoken = false
        return false
    }

    /// `job` finished, or stopped waiting in line (it gained a dependency or a condition, or its
    /// categories changed): lets its categories go, or takes it out of line, and makes ready the
    /// jobs whose turn it is now. Call with `engineLock` held.
    func leaveLocked(_ job: Job, _ extras: _JobExtras, _ actions: inout _Actions) {
        let names = extras.lineCategories
        if extras.holdsCategories {
            extras.holdsCategories = false
            for name in names {
                categories[name]?.holder = nil
            }
        } else if extras.parkTicket != 0 {
            extras.parkTicket = 0
            extras.exclusivityWoken = false
            for name in names {
                categories[name]?.dead += 1
            }
        } else {
            return
        }
        wakeFirstInLineLocked(names, &actions)
    }

    /// For each of `names`, makes the first job in line ready if all its categories are now its
    /// turn, and forgets categories nobody uses. Call with `engineLock` held.
    private func wakeFirstInLineLocked(_ names: [String], _ actions: inout _Actions) {
        for name in names {
            guard let category = categories[name] else { continue }
            if let first = category.first(), let firstExtras = first._extras, !firstExtras.exclusivityWoken,
                grantable(first, firstExtras.lineCategories)
            {
                firstExtras.exclusivityWoken = true
                first._carryOut(first._lifecycle.exclusivityCleared(), &actions)
            }
            category.compact(&actions)
            if category.isUnused {
                actions.releaseAfterUnlocking(category.line)
                categories[name] = nil
            }
        }
    }

    /// Whether a group `extras`' job belongs to (at any depth) holds `name`.
    private func heldByAncestor(_ name: String, of extras: _JobExtras) -> Bool {
        guard let holder = categories[name]?.holder else { return false }
        var group = extras.parentGroup
        while let ancestor = group {
            if ancestor === holder { return true }
            group = ancestor._extras?.parentGroup
        }
        return false
    }

    /// Who holds category `name`, and who is first in line for it, for diagnostics. Call with
    /// `engineLock` held.
    func occupantsLocked(of name: String) -> (holder: Job?, first: Job?) {
        guard let category = categories[name] else { return (nil, nil) }
        return (category.holder, category.first())
    }

    /// Why `names` cannot all be taken now, for messages: the first one held or with a line.
    /// Call with `engineLock` held.
    func obstacleLocked(_ names: [String]) -> String {
        for name in names {
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
    /// - Complexity: Claiming and finishing are O(categories), amortized.
    public var exclusivityCategories: Set<String> {
        get { engineLock.withLock { Set(_extras?.exclusivityCategories ?? []) } }
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
            extras.exclusivityCategories = newValue.sorted()
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
