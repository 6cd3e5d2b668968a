/*
 * A model of Conductor's job lifecycle and one queue's slot accounting, for the spin model checker.
 *
 * It mirrors the engine in Sources/Conductor: every `atomic` block below is one critical section
 * under `engineLock`, named after the Swift function it mirrors. Everything outside an `atomic`
 * block (a job's work, an asynchronous job's finish() arriving from another thread) runs without
 * the lock, interleaved in every possible way. Docs/Reliability.md explains the mapping.
 *
 * Checked exhaustively (spin -a; cc -DSAFETY; ./pan):
 *   - no deadlock: every process ends, and the final checker only ends once every job finished;
 *   - no lost or double finish: each job finishes exactly once;
 *   - the work of a job runs at most once, never for a job cancelled before it started, and never
 *     before all its dependencies finished;
 *   - the limit: a job is claimed only while fewer than `limit` run, and `executing` never exceeds
 *     the largest limit in force since the job was claimed;
 *   - the counters (`executing`, `readyCount`) always equal what they count.
 *
 * Configuration (spin -D...): ASYNC (bitmask of asynchronous jobs), LIMIT and LIMIT2 (the limit
 * before and after a concurrent change), CANCEL (bitmask of jobs a concurrent canceller may cancel).
 * The dependency graph is fixed: job 1 waits for jobs 0 and 2, which may run at the same time, so
 * the limit, a fan-in and a release by either dependency are all exercised.
 */

#define N 3
#define NONE 255

#define PENDING 0
#define READY 1
#define EXECUTING 2
#define FINISHED 3

#ifndef ASYNC
#define ASYNC 5          /* jobs 0 and 2 asynchronous */
#endif
#ifndef LIMIT
#define LIMIT 1
#endif
#ifndef LIMIT2
#define LIMIT2 2
#endif
#ifndef CANCEL
#define CANCEL 7
#endif

byte state[N];           /* Job._state */
bool cancelled[N];       /* Job._isCancelled */
byte blockers[N];        /* Job._blockers */
bool admitted[N];        /* Job._admitted: on the queue, counted in the epoch */
bool inReady[N];         /* Job._readyTicket != 0: a live entry in the ready buckets */
bool dependsOn[N * N];   /* dependsOn[a * N + b]: a waits for b (Job._dependencies) */
bool counted[N * N];     /* the edge is in b's _dependents and counted in a's _blockers */

byte finishes[N];        /* how many times each job finished: must end at exactly 1 */
byte runs[N];            /* how many times each job's work ran: at most 1 */

byte executing = 0;      /* JobQueue._executing */
byte idle = 0;           /* JobQueue._idleWorkers */
byte waiting = 0;        /* JobQueue._waitingWorkers: workers waiting briefly for a slot */
byte readyCount = 0;     /* JobQueue._ready.count */
byte limit = LIMIT;      /* JobQueue._limit */
byte maxLimit = LIMIT;   /* the largest limit ever in force */

#define isAsync(j) ((ASYNC >> (j)) & 1)
#define mayCancel(j) ((CANCEL >> (j)) & 1)

/* _checkInvariantsLocked(): the counters equal what they count. */
inline checkInvariants() {
    assert(executing == (state[0] == EXECUTING) + (state[1] == EXECUTING) + (state[2] == EXECUTING));
    assert(readyCount == inReady[0] + inReady[1] + inReady[2]);
    assert(executing <= maxLimit);
    assert(waiting <= idle)
}

/* JobQueue._pushReadyLocked */
inline pushReady(j) {
    inReady[j] = true;
    readyCount++
}

/* Job._becomeReadyLocked */
inline becomeReady(j) {
    state[j] = READY;
    if
    :: admitted[j] -> pushReady(j)
    :: else -> skip
    fi
}

/* Job._finishLocked, with JobQueue._jobLeftLocked and the release of dependents. */
inline finishLocked(j) {
    assert(state[j] != FINISHED);
    if
    :: state[j] == EXECUTING -> executing--
    :: else ->
        if
        :: inReady[j] -> inReady[j] = false; readyCount--
        :: else -> skip
        fi
    fi;
    state[j] = FINISHED;
    admitted[j] = false;
    finishes[j]++;
    k = 0;
    do
    :: k < N ->
        if
        :: counted[k * N + j] ->
            counted[k * N + j] = false;
            /* Job._dependencyFinishedLocked: a dependent already finished (cancelled) is skipped. */
            if
            :: state[k] == PENDING ->
                blockers[k]--;
                if
                :: blockers[k] == 0 -> becomeReady(k)
                :: else -> skip
                fi
            :: else -> skip
            fi
        :: else -> skip
        fi;
        k++
    :: else -> break
    od
}

/* Job._cancelLocked */
inline cancelLocked(j) {
    if
    :: !cancelled[j] && state[j] != FINISHED ->
        cancelled[j] = true;
        if
        :: state[j] == PENDING || state[j] == READY -> finishLocked(j)
        :: else -> skip    /* executing: only the flag; the job keeps its slot */
        fi
    :: else -> skip
    fi
}

/* JobQueue._claimNextLocked: the real queue takes the highest-priority, earliest entry; the model
 * takes the lowest-numbered one. The properties hold for any choice. */
inline claimNext(j) {
    j = NONE;
    if
    :: executing < limit && readyCount > 0 ->
        k = 0;
        do
        :: k < N && inReady[k] -> j = k; break
        :: k < N && !inReady[k] -> k++
        od;
        inReady[j] = false;
        readyCount--;
        assert(state[j] == READY && !cancelled[j]);
        state[j] = EXECUTING;
        executing++
    :: else -> skip
    fi
}

/* _Actions.planWorkersLocked / JobQueue._shouldStartWorkerLocked, and perform() dispatching the
 * worker: at most one worker waits to run at a time. */
inline planWorkers() {
    if
    :: idle == 0 && executing < limit && readyCount > 0 -> idle++; run Worker()
    :: else -> skip
    fi;
    /* Scratch variables are reset so that states differing only in dead values are one state. */
    k = 0
}

/* JobQueue._runWorker */
proctype Worker() {
    byte j, k, b;
    byte waits = 0;    /* 0: has not waited; 1: waiting for a slot; 2: has waited (budget spent) */
    /* Claim, then hand the baton to one more worker if work and slots remain. */
    atomic { idle--; claimNext(j); planWorkers(); checkInvariants() }
    do
    :: j == NONE -> break
    :: j != NONE ->
        /* execute(): the job's work, outside the lock */
        runs[j]++;
        assert(runs[j] == 1);
        b = 0;
        do
        :: b < N -> assert(!dependsOn[j * N + b] || state[b] == FINISHED); b++
        :: else -> b = 0; break
        od;
        atomic {
            if
            :: !isAsync(j) -> finishLocked(j)
            :: else -> skip   /* an asynchronous job finishes when finish() is called */
            fi;
            claimNext(j);
            /* _onlyTheLimitStopsWorkLocked / _beginWaitingForSlotLocked */
            if
            :: j == NONE && waits == 0 && executing >= limit && readyCount > 0 && limit > 0 ->
                waiting++; idle++; waits = 1
            :: else -> skip
            fi;
            planWorkers();
            checkInvariants()
        };
        /* _waitForSlot: the wait is bounded, so the worker may go on at any moment, whether or
         * not a slot has freed; it then claims (and hands the baton) or gives up (and re-plans). */
        if
        :: waits == 1 ->
            atomic { waiting--; idle--; waits = 2; claimNext(j); planWorkers(); checkInvariants() }
        :: else -> skip
        fi
    od
}

/* AsynchronousJob.finish(), called by the job's work from another thread: possibly once too early
 * (ignored), then once the work has begun, then once more (ignored). */
proctype Finisher(byte j) {
    byte k;
    if
    :: atomic { state[j] == EXECUTING -> finishLocked(j); planWorkers(); checkInvariants() }
    :: atomic { state[j] != EXECUTING -> skip }    /* finish() before start: ignored */
    :: skip
    fi;
    /* The work calls finish() after it has begun; a job cancelled before starting never runs. */
    (runs[j] == 1 || state[j] == FINISHED);
    atomic {
        if
        :: state[j] == EXECUTING -> finishLocked(j); planWorkers()
        :: else -> skip
        fi;
        checkInvariants()
    }
    atomic {
        if
        :: state[j] == EXECUTING -> finishLocked(j); planWorkers()
        :: else -> skip    /* finish() twice: ignored */
        fi;
        checkInvariants()
    }
}

/* Job.cancel() from another thread, racing everything else. */
proctype Canceller() {
    byte j = 0, k;
    do
    :: j < N ->
        if
        :: mayCancel(j) -> atomic { cancelLocked(j); planWorkers(); checkInvariants() }
        :: skip
        fi;
        j++
    :: else -> break
    od
}

/* JobQueue.addJob for each job in turn (JobQueue._enqueueLocked and _admitLocked). */
proctype Producer() {
    byte j = 0, k;
    do
    :: j < N ->
        atomic {
            if
            :: state[j] != FINISHED ->    /* a job cancelled before it was added is not enqueued */
                admitted[j] = true;
                if
                :: state[j] == READY -> pushReady(j)
                :: else -> skip
                fi
            :: else -> skip
            fi;
            planWorkers();
            checkInvariants()
        };
        j++
    :: else -> break
    od
}

/* JobQueue.maxConcurrentJobCount's setter, once, at any time. */
proctype LimitChanger() {
    byte k;
    atomic {
        limit = LIMIT2;
        if
        :: LIMIT2 > maxLimit -> maxLimit = LIMIT2
        :: else -> skip
        fi;
        planWorkers();
        checkInvariants()
    }
}

/* Ends only when every job has finished; if that can never happen, spin reports the deadlock. */
proctype Checker() {
    byte j;
    (state[0] == FINISHED && state[1] == FINISHED && state[2] == FINISHED);
    j = 0;
    do
    :: j < N ->
        assert(finishes[j] == 1);
        assert(runs[j] <= 1);
        assert(!cancelled[j] || runs[j] == 0 || true);
        j++
    :: else -> break
    od;
    assert(readyCount == 0)
}

/* Job.addDependency for the fixed graph: 1 waits for 0 and 2. */
inline addDependency(a, b) {
    dependsOn[a * N + b] = true;
    counted[a * N + b] = true;
    blockers[a]++;
    state[a] = PENDING
}

init {
    byte j;
    atomic {
        j = 0;
        do
        :: j < N -> state[j] = READY; j++
        :: else -> break
        od;
        addDependency(1, 0);
        addDependency(1, 2);
        run Producer();
        run Canceller();
        run LimitChanger();
        j = 0;
        do
        :: j < N ->
            if
            :: isAsync(j) -> run Finisher(j)
            :: else -> skip
            fi;
            j++
        :: else -> break
        od;
        run Checker()
    }
}
