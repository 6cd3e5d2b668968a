/*
 * A model of Conductor's job lifecycle and one queue's slot accounting, for the spin model checker.
 *
 * It mirrors the engine in Sources/Conductor: every `atomic` block below is one critical section
 * under `engineLock`, named after the Swift function it mirrors. Everything outside an `atomic`
 * block (a job's work, an asynchronous job's finish() arriving from another thread) runs without
 * the lock, interleaved in every possible way. The job's lifecycle (_JobLifecycle) is spread over
 * `state`, `cancelled`, `blockers`, `started` and `outcome`; its events are the inlines named after
 * its methods. Docs/Reliability.md explains the mapping.
 *
 * Checked exhaustively (spin -a; cc -DSAFETY; ./pan):
 *   - no deadlock: every process ends, and the final checker only ends once every job finished;
 *   - no lost or double finish: each job finishes exactly once;
 *   - the work of a job runs at most once, never for a job cancelled before it started, and never
 *     before all its dependencies finished;
 *   - outcomes: each finished job has exactly one outcome, set once when it finishes and never
 *     overwritten, by the rule of _JobLifecycle.finished(failed:): failed if its work ran and
 *     failed, otherwise cancelled if it was cancelled (so a job whose work never ran is cancelled),
 *     otherwise succeeded;
 *   - the .requireSuccess policy: the dependent's work never runs unless the dependency succeeded,
 *     and if the dependency did not succeed, the dependent is cancelled without running;
 *   - the limit: a job is claimed only while fewer than `limit` run, and `executing` never exceeds
 *     the largest limit in force since the job was claimed;
 *   - the counters (`executing`, `readyCount`) always equal what they count.
 *
 * Configuration (spin -D...): ASYNC (bitmask of asynchronous jobs), LIMIT and LIMIT2 (the limit
 * before and after a concurrent change), CANCEL (bitmask of jobs a concurrent canceller may
 * cancel), FAIL (bitmask of jobs whose work may fail), REQUIRE (bitmask of job 1's dependencies
 * whose edge has the .requireSuccess policy: 1 for job 0, 4 for job 2; other edges: .afterFinish).
 * The dependency graph is fixed: job 1 waits for jobs 0 and 2, which may run at the same time, so
 * the limit, a fan-in and a release by either dependency are all exercised.
 */

#define N 3
#define NONE 255

#define PENDING 0
#define READY 1
#define EXECUTING 2
#define FINISHED 3

/* _JobLifecycle.outcome: nil until the job finishes, then one _OutcomeKind */
#define NO_OUTCOME 0
#define SUCCEEDED 1
#define FAILED 2
#define CANCELLED 3

/* How a job's work ended, as it reports it: execute() returned or finish() was called; execute()
 * threw, or finish(throwing:) was called, with an error (failure) or with CancellationError. Or
 * nothing that finishes the job now: an asynchronous job's execute() returned, or a finish() call
 * is ignored. */
#define NO_FINISH 0
#define RETURNED 1
#define THREW_ERROR 2
#define THREW_CANCELLATION 3

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
#ifndef FAIL
#define FAIL 0           /* no job's work fails */
#endif
#ifndef REQUIRE
#define REQUIRE 0        /* both edges .afterFinish */
#endif

byte state[N];           /* Job._lifecycle.state */
bool cancelled[N];       /* Job._lifecycle.isCancelled */
byte blockers[N];        /* Job._lifecycle.waits.dependencies */
bool admitted[N];        /* Job._admitted: on the queue, counted in the epoch */
bool inReady[N];         /* Job._isInLine: a live entry in the ready buckets */
bool dependsOn[N * N];   /* dependsOn[a * N + b]: a waits for b (Job._dependencies) */
bool counted[N * N];     /* the edge is in b's _dependents and counted in a's _blockers */

byte outcome[N];         /* Job._lifecycle.outcome: NO_OUTCOME until it finishes */

byte finishes[N];        /* how many times each job finished: must end at exactly 1 */
byte runs[N];            /* how many times each job's work ran: at most 1 */
bool started[N];         /* Job._lifecycle.didStart: it was claimed (ready -> executing) */
/* What the work did, as opposed to what the engine made of it: it ended, while the job executed,
 * with an error (execute() threw it, or finish(throwing:) was called with it), either any error or
 * CancellationError. */
bool workFailed[N];
bool workCancelled[N];

byte executing = 0;      /* JobQueue._executing */
byte idle = 0;           /* JobQueue._idleWorkers */
byte waiting = 0;        /* JobQueue._waitingWorkers: workers waiting briefly for a slot */
byte running = 0;        /* JobQueue._runningWorkers */
byte standby = 0;        /* JobQueue._standbyWorkers: a helper standing by */
byte claims = 0;         /* JobQueue._claims */
byte sentClaims = 0;     /* JobQueue._helperSentClaims */
byte readyCount = 0;     /* JobQueue._ready.count */
byte limit = LIMIT;      /* JobQueue._limit */
byte maxLimit = LIMIT;   /* the largest limit ever in force */

/* Scratch of a critical section, always reset at its end (so that they do not add states): the
 * job being finished and whether its work failed, and the dependents the .requireSuccess cascade
 * has yet to cancel (_ActionsOverflow.cascade), a bitmask. Each is expanded once per call site, so
 * the choices are made first and the engine's code follows once. */
byte f = NONE;
bool fl = false;
byte cascade = 0;
byte how = NO_FINISH;    /* how the work ended, chosen by the critical section that finishes it */

#define isAsync(j) ((ASYNC >> (j)) & 1)
#define mayCancel(j) ((CANCEL >> (j)) & 1)
#define mayFail(j) ((FAIL >> (j)) & 1)
/* Job._requiresSuccessLocked(of:): whether a's edge to b has the .requireSuccess policy. */
#define requiresSuccess(a, b) ((a) == 1 && ((REQUIRE >> (b)) & 1))

/* _checkInvariantsLocked(): the counters equal what they count. */
inline checkInvariants() {
    assert(executing == (state[0] == EXECUTING) + (state[1] == EXECUTING) + (state[2] == EXECUTING));
    assert(readyCount == inReady[0] + inReady[1] + inReady[2]);
    assert(executing <= maxLimit);
    assert(waiting <= idle);
    assert(standby <= 1);
    /* a job has an outcome exactly when it has finished */
    assert((state[0] == FINISHED) == (outcome[0] != NO_OUTCOME));
    assert((state[1] == FINISHED) == (outcome[1] != NO_OUTCOME));
    assert((state[2] == FINISHED) == (outcome[2] != NO_OUTCOME))
}

/* JobQueue._ready.push: the job is put in line (JobQueue._admitLocked, _jobBecameReadyLocked) */
inline pushReady(j) {
    inReady[j] = true;
    readyCount++
}

/* The job became ready: Job._carryOut(.becameReady), and JobQueue._jobBecameReadyLocked puts it in
 * line if the queue admitted it. */
inline becomeReady(j) {
    state[j] = READY;
    if
    :: admitted[j] -> pushReady(j)
    :: else -> skip
    fi
}

/* _JobLifecycle.outcome is private(set): only finished(failed:) sets it, once. */
inline setOutcome(j, o) {
    assert(outcome[j] == NO_OUTCOME);
    outcome[j] = o
}

/* _JobLifecycle.cancelled(): only the first cancellation of an unfinished job counts. One that has
 * not started must finish now, without running (f = j); a running one is only flagged and keeps
 * its slot until its work ends. */
inline lifecycleCancelled(j) {
    if
    :: !cancelled[j] && state[j] != FINISHED ->
        cancelled[j] = true;
        if
        :: state[j] == PENDING || state[j] == READY -> f = j
        :: else -> skip
        fi
    :: else -> skip
    fi
}

/* Job._finishLocked(failed:) for job f, with JobQueue._jobLeftLocked and the release of its
 * dependents; then _Actions.cancelDependentsLocked: each dependent that the .requireSuccess policy
 * queued in `cascade` is cancelled (Job._cancelLocked), which finishes it in turn, iteratively,
 * never by recursion. Swift pops the last queued dependent, the model the lowest-numbered; any
 * order gives the same result. Ends with f == NONE, fl == false, cascade == 0. */
inline finishPending() {
    do
    :: f != NONE ->
        /* _JobLifecycle.finished(failed:): its _require()s, then the outcome, fixed once. */
        assert(state[f] != FINISHED);
        assert(state[f] == EXECUTING || cancelled[f]);
        assert(!fl || state[f] == EXECUTING);
        if
        :: state[f] == EXECUTING -> executing--
        :: else ->
            if
            :: inReady[f] -> inReady[f] = false; readyCount--
            :: else -> skip
            fi
        fi;
        state[f] = FINISHED;
        if
        :: fl -> setOutcome(f, FAILED)
        :: !fl && cancelled[f] -> setOutcome(f, CANCELLED)
        :: else -> setOutcome(f, SUCCEEDED)
        fi;
        admitted[f] = false;
        finishes[f]++;
        k = 0;
        do
        :: k < N ->
            if
            :: counted[k * N + f] ->
                counted[k * N + f] = false;
                /* Job._dependencyFinishedLocked */
                if
                :: outcome[f] != SUCCEEDED && state[k] == PENDING && requiresSuccess(k, f) ->
                    cascade = cascade | (1 << k)    /* _Actions.cancelLater */
                :: else ->
                    /* _JobLifecycle.dependencyFinished(): a dependent already finished (cancelled)
                     * is skipped. */
                    if
                    :: state[k] == PENDING ->
                        assert(blockers[k] > 0);    /* _JobLifecycle.release() */
                        blockers[k]--;
                        if
                        :: blockers[k] == 0 -> becomeReady(k)
                        :: else -> skip
                        fi
                    :: else -> assert(state[k] == FINISHED)
                    fi
                fi
            :: else -> skip
            fi;
            k++
        :: else -> break
        od;
        f = NONE;
        fl = false
    :: f == NONE && cascade != 0 ->
        /* _Actions.drainCascadeLocked: the next queued dependent is cancelled (_cancelLocked). */
        k = 0;
        do
        :: (cascade >> k) & 1 -> break
        :: else -> k++
        od;
        cascade = cascade & ~(1 << k);
        lifecycleCancelled(k)
    :: else -> break
    od;
    k = 0
}

/* Job._finishLocked(failed:): `failed` when the work ended with an error other than
 * CancellationError. */
inline finishLocked(j, failed) {
    f = j;
    fl = failed;
    finishPending()
}

/* _JobLifecycle.workReportedCancellation(): the work ended with CancellationError; the job counts
 * as cancelled (the first cancellation counts). Job._finishLocked(failure:) then finishes it. */
inline workReportedCancellation(j) {
    assert(state[j] == EXECUTING);
    cancelled[j] = true
}

/* Job._finishLocked(failure:) for an executing job whose work just ended `how`: an error fails
 * it, CancellationError cancels it. The ghosts workFailed and workCancelled record what the work
 * did. Resets `how`. */
inline workEnded(j) {
    if
    :: how == THREW_ERROR -> workFailed[j] = true
    :: how == THREW_CANCELLATION -> workCancelled[j] = true; workReportedCancellation(j)
    :: else -> skip
    fi;
    finishLocked(j, how == THREW_ERROR);
    how = NO_FINISH
}

/* Job._cancelLocked */
inline cancelLocked(j) {
    lifecycleCancelled(j);
    finishPending()
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
        started[j] = true;
        executing++;
        claims++
    :: else -> skip
    fi
}

/* _Actions.planWorkersLocked / JobQueue._shouldStartWorkerLocked, and perform() dispatching the
 * worker: at most one worker waits to run at a time, and none while workers run and a helper
 * stands by. A worker sent while others run is a helper, which measures their pace from now. */
inline planWorkers() {
    if
    :: idle == 0 && executing < limit && readyCount > 0 && !(running > 0 && standby > 0) ->
        if
        :: running > 0 -> sentClaims = claims
        :: else -> skip
        fi;
        idle++; run Worker(false)
    :: else -> skip
    fi;
    /* Scratch variables are reset so that states differing only in dead values are one state. */
    k = 0
}

/* JobQueue._runWorker; `fromStandby`: a helper that stood by, sent again after a while
 * (`asyncAfter`). */
proctype Worker(bool fromStandby) {
    byte j, k, b;
    byte waits = 0;    /* 0: has not waited; 1: waiting for a slot; 2: has waited (budget spent) */
    bool callbacks = false;    /* it finished its job, and then: the job has callbacks to run
                                  before the next claim */
    bool stoodBy = false;
    /* Claim, then hand the baton to one more worker if work and slots remain. A helper may stand
     * by instead (_helperShouldStandByLocked): the pace is a matter of time, so either choice is
     * possible, but only if the running workers claimed a job since the helper was sent. A helper
     * finding them stuck always joins. */
    atomic {
        if
        :: fromStandby -> standby--
        :: else -> idle--
        fi;
        if
        :: running > 0 && executing < limit && readyCount > 0 && claims != sentClaims ->
            /* unless one already stands by: then this one leaves */
            if
            :: standby == 0 -> standby++; sentClaims = claims; stoodBy = true
            :: else -> skip
            fi;
            j = NONE
        :: true ->
            claimNext(j);
            if
            :: j != NONE -> running++
            :: else -> skip
            fi
        fi;
        planWorkers();
        checkInvariants()
    };
    if
    :: stoodBy -> stoodBy = false; run Worker(true)
    :: else -> skip
    fi;
    do
    :: j == NONE -> break
    :: j != NONE ->
        /* execute(): the job's work, outside the lock */
        runs[j]++;
        assert(runs[j] == 1);
        b = 0;
        do
        :: b < N ->
            /* Dependencies finished; under .requireSuccess, successfully. (One statement, so as
             * not to add interleavings.) */
            assert((!dependsOn[j * N + b] || state[b] == FINISHED) &&
                   (!requiresSuccess(j, b) || outcome[b] == SUCCEEDED));
            b++
        :: else -> b = 0; break
        od;
        atomic {
            /* The work's result. execute() returned: a synchronous job finishes; an asynchronous
             * one finishes when finish() is called. It threw (a job whose work may fail), an error
             * or CancellationError: the job finishes now, an asynchronous one included, unless it
             * already finished (its finish() came first). */
            if
            :: !isAsync(j) -> how = RETURNED
            :: isAsync(j) -> skip
            :: mayFail(j) && state[j] == EXECUTING -> how = THREW_ERROR
            :: mayFail(j) && state[j] == EXECUTING -> how = THREW_CANCELLATION
            fi;
            if
            :: how != NO_FINISH -> workEnded(j); callbacks = true
            :: else -> skip
            fi;
            if
            :: callbacks ->
                /* The finished job has callbacks (`actions.hasDeliveries`): claim nothing now. */
                j = NONE
            :: running > 1 ->
                /* _othersKeepPaceLocked: the others keep pace without this worker (a matter of
                 * time, so at any moment while another runs). This one leaves, and stands by
                 * unless a helper already does. */
                callbacks = false;
                j = NONE;
                running--;
                if
                :: standby == 0 -> standby++; sentClaims = claims; stoodBy = true
                :: else -> skip
                fi
            :: true ->
                callbacks = false;
                claimNext(j);
                /* _onlyTheLimitStopsWorkLocked / _beginWaitingForSlotLocked */
                if
                :: j == NONE && waits == 0 && executing >= limit && readyCount > 0 && limit > 0 ->
                    waiting++; idle++; waits = 1
                :: else -> skip
                fi;
                if
                :: j == NONE && waits != 1 -> running--    /* leaves */
                :: else -> skip
                fi
            fi;
            planWorkers();
            checkInvariants()
        };
        if
        :: stoodBy -> stoodBy = false; run Worker(true)
        :: else -> skip
        fi;
        /* The callbacks, outside the lock. The worst case: a completion block that waits until
         * every job has finished (its dependents, the next job of the queue). Had the worker
         * claimed a job first, that job could never run and spin would report the deadlock. */
        if
        :: callbacks ->
            (state[0] == FINISHED && state[1] == FINISHED && state[2] == FINISHED);
            /* _claimAfterCallbacks */
            atomic {
                callbacks = false;
                claimNext(j);
                if
                :: j == NONE -> running--    /* leaves */
                :: else -> skip
                fi;
                planWorkers();
                checkInvariants()
            }
        :: else -> skip
        fi;
        /* _waitForSlot: the wait is bounded, so the worker may go on at any moment, whether or
         * not a slot has freed; it then claims (and hands the baton) or gives up (and re-plans). */
        if
        :: waits == 1 ->
            atomic {
                waiting--; idle--; waits = 2;
                claimNext(j);
                if
                :: j == NONE -> running--    /* leaves: the budget is spent */
                :: else -> skip
                fi;
                planWorkers();
                checkInvariants()
            }
        :: else -> skip
        fi
    od
}

/* AsynchronousJob.finish(), or finish(throwing:) for a job whose work may fail (both are
 * Job._finish(failure:)). Only a call while the job executes counts; one before it started or after
 * it finished is ignored. */
inline finishCall(j) {
    atomic {
        if
        :: state[j] == EXECUTING -> how = RETURNED
        :: state[j] == EXECUTING && mayFail(j) -> how = THREW_ERROR
        :: state[j] == EXECUTING && mayFail(j) -> how = THREW_CANCELLATION
        :: else -> skip
        fi;
        if
        :: how != NO_FINISH -> workEnded(j); planWorkers()
        :: else -> skip
        fi;
        checkInvariants()
    }
}

/* The calls of finish() from another thread: possibly once at any time (too early: ignored), then
 * once the work has begun, then once more (ignored). */
proctype Finisher(byte j) {
    byte k;
    if
    :: finishCall(j)
    :: skip
    fi;
    /* The work calls finish() after it has begun; a job cancelled before starting never runs. */
    (runs[j] == 1 || state[j] == FINISHED);
    finishCall(j);
    finishCall(j)
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
    byte j, b;
    bool cause;
    (state[0] == FINISHED && state[1] == FINISHED && state[2] == FINISHED);
    /* What it checks no longer changes (only runs[] may still catch up with started[]), so it is
     * checked in one step: a d_step, not an atomic block, as it is bookkeeping, not the engine. */
    d_step {
        j = 0;
        do
        :: j < N ->
            assert(finishes[j] == 1);
            assert(runs[j] <= started[j]);
            /* Exactly one outcome (setOutcome asserts it was set only once), by the rule. */
            assert(outcome[j] != NO_OUTCOME);
            assert(!(started[j] && workFailed[j]) || outcome[j] == FAILED);    /* ran and failed */
            assert(!(cancelled[j] && !workFailed[j]) || outcome[j] == CANCELLED);
            assert(started[j] || outcome[j] == CANCELLED);    /* never ran: cancelled */
            assert(cancelled[j] || workFailed[j] || outcome[j] == SUCCEEDED);
            assert(outcome[j] != FAILED || workFailed[j]);
            assert(!workCancelled[j] || outcome[j] == CANCELLED);
            /* Under .requireSuccess, a dependency that did not succeed leaves the dependent
             * cancelled, without having run; and nothing else cancels a job but cancel(), its own
             * work (CancellationError) and that cascade (`cause`: one of them happened). */
            cause = mayCancel(j) || workCancelled[j];
            b = 0;
            do
            :: b < N ->
                assert(!requiresSuccess(j, b) || outcome[b] == SUCCEEDED ||
                       (outcome[j] == CANCELLED && !started[j]));
                cause = cause || (requiresSuccess(j, b) && outcome[b] != SUCCEEDED);
                b++
            :: else -> break
            od;
            assert(!cancelled[j] || cause);
            j++
        :: else -> break
        od;
        assert(readyCount == 0)
    }
}

/* Job.addDependency(_:policy:) for the fixed graph: 1 waits for 0 and 2 (each edge's policy is
 * REQUIRE's, see requiresSuccess). */
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
