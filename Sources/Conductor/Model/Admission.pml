/*
 * A model of adding jobs without the engine lock (JobQueue+Admission.swift), for spin.
 *
 * Producers add jobs with `addJob(_:)` (a closure): each pushes its job onto the queue's `_pushed`
 * stack with one atomic step, then reads `_admitsWithoutLock`; when that is off it takes the lock
 * and admits what was pushed itself. Workers admit when they claim, when the last unsettled job
 * settles and when they plan; a controller that suspends or resumes the queue, and a waiter, admit
 * first. (The engine also admits when a job leaves the queue, which the model's counts do not
 * need.) `_shouldStartWorkerLocked(_:)` (`plan` below) recomputes the flag at the end of each
 * section and, when it turns the flag off, reads the stack again after the store.
 *
 * Unlike Lifecycle.pml, a critical section here is not one `atomic` block: the lock excludes the
 * other lock holders only, and the producers' push and flag read interleave with every step of a
 * section. Promela's interleaving is sequentially consistent, as the Swift code's atomics are.
 *
 * Checked exhaustively (spin -a; cc -DSAFETY; ./pan):
 *   - no lost job: once every process has ended, every job added has run exactly once, and nothing
 *     is left pushed, ready, executing or unsettled;
 *   - no deadlock: every process ends;
 *   - the limit: a job is claimed only while fewer than LIMIT run;
 *   - waiting: when the queue's waiter is woken (its last unsettled job settled), every addJob
 *     that had returned by then has run; so a job pushed while the count fell to zero is waited
 *     for too, or its addJob returns only after the wake-up.
 *
 * Configuration (spin -D...): LIMIT, PRODUCERS and JOBS (jobs per producer), SUSPEND (1: the
 * queue starts suspended and a controller resumes it; 2: the controller suspends and then resumes
 * it while the producers add), WAIT (1: a waiter calls waitUntilAllJobsAreFinished() meanwhile).
 */

#ifndef LIMIT
#define LIMIT 1
#endif
#ifndef PRODUCERS
#define PRODUCERS 2
#endif
#ifndef JOBS
#define JOBS 2
#endif
#ifndef SUSPEND
#define SUSPEND 0
#endif
#ifndef WAIT
#define WAIT 0
#endif

byte pushed = 0;          /* _pushed: jobs on the stack (the order does not matter here) */
bool flag = false;        /* _admitsWithoutLock */
bool cached = false;      /* _admitsWithoutLockCached (under the lock) */
bool locked = false;      /* engineLock */
/* Under the lock: */
byte ready = 0;           /* admitted, in line */
byte executing = 0;
byte idle = 0;            /* workers dispatched that have not run */
byte running = 0;         /* _runningWorkers */
byte standby = 0;         /* _standbyWorkers: a helper standing by */
byte claims = 0;          /* _claims */
byte sentClaims = 0;      /* _helperSentClaims */
byte unsettled = 0;
bool suspended = (SUSPEND == 1);
bool waiting = false;     /* a waiter is registered (_waiters) */
/* Checks: */
byte ran = 0;
byte returned = 0;        /* addJob calls that have returned */

inline lock() { atomic { !locked -> locked = true } }
inline unlock() { locked = false }

/* _admitPushedLocked: one exchange of the stack; the counts it changes are under the lock. */
inline admit() {
    atomic { ready = ready + pushed; unsettled = unsettled + pushed; pushed = 0 }
}

/* _shouldStartWorkerLocked(_:), the handshake's locked side. Sets `start` to dispatch a worker. */
inline plan(start) {
    assert(standby <= 1);                     /* one helper stands by at most */
    start = false;
    do
    :: admit();
       if
       :: !suspended && idle == 0 && executing < LIMIT && ready > 0 && !(running > 0 && standby > 0) ->
          if
          :: running > 0 -> sentClaims = claims    /* a helper */
          :: else -> skip
          fi;
          idle = 1; start = true
       :: else -> skip
       fi;
       if
       :: (unsettled > 0 && (suspended || executing >= LIMIT || idle > 0 || (standby > 0 && running > 0))) == cached ->
          break
       :: else ->
          cached = !cached;
          flag = cached;                      /* the sequentially consistent store */
          if
          :: cached -> break
          :: else ->
             if
             :: pushed == 0 -> break          /* the sequentially consistent load after it */
             :: else -> skip                  /* a push landed: admit it, and decide again */
             fi
          fi
       fi
    od
}

/* _claimNextLocked */
inline claim(have) {
    admit();
    if
    :: !suspended && executing < LIMIT && ready > 0 ->
       ready--; executing++; claims++; have = true;
       assert(executing <= LIMIT)
    :: else -> have = false
    fi
}

/* `fromStandby`: a helper that stood by, sent again after a while (`asyncAfter`). */
proctype Worker(bool fromStandby) {
    bool have = false;
    bool start = false;
    bool stoodBy = false;
    lock();
    if
    :: fromStandby -> standby--
    :: else -> assert(idle > 0); idle--
    fi;
    admit();
    /* A helper may stand by (the pace is a matter of time) if the running workers claimed a job
     * since it was sent; finding them stuck, it joins. */
    if
    :: running > 0 && !suspended && executing < LIMIT && ready > 0 && claims != sentClaims ->
       if
       :: standby == 0 -> standby++; sentClaims = claims; stoodBy = true
       :: else -> skip                        /* one already stands by: this one leaves */
       fi
    :: true ->
       claim(have);
       if
       :: have -> running++
       :: else -> skip
       fi
    fi;
    plan(start);
    unlock();
    if
    :: start -> run Worker(false)
    :: else -> skip
    fi;
    if
    :: stoodBy -> stoodBy = false; run Worker(true)
    :: else -> skip
    fi;
    do
    :: have ->
       ran++;                                 /* the job's work, without the lock */
       lock();
       executing--;
       /* _settleLocked: _admitBeforeSettlingLocked, then the count */
       if
       :: unsettled == 1 ->
          if
          :: cached -> cached = false; flag = false
          :: else -> skip
          fi;
          admit()
       :: else -> skip
       fi;
       unsettled--;
       if
       :: unsettled == 0 && waiting ->
          assert(ran >= returned);
          waiting = false
       :: else -> skip
       fi;
       if
       :: running > 1 ->
          /* More workers run than the jobs need: this one leaves, and stands by unless a helper
           * already does. */
          have = false;
          running--;
          if
          :: standby == 0 -> standby++; sentClaims = claims; stoodBy = true
          :: else -> skip
          fi
       :: true ->
          claim(have);
          if
          :: !have -> running--    /* leaves */
          :: else -> skip
          fi
       fi;
       plan(start);
       unlock();
       if
       :: start -> run Worker(false)
       :: else -> skip
       fi;
       if
       :: stoodBy -> stoodBy = false; run Worker(true)
       :: else -> skip
       fi
    :: !have -> break
    od
}

proctype Producer() {
    byte added = 0;
    bool sawFlag;
    bool start = false;
    do
    :: added < JOBS ->
       pushed++;                              /* the compare-and-swap */
       atomic {
           sawFlag = flag;                    /* the sequentially consistent load after it */
           if
           :: sawFlag -> returned++           /* addJob returns */
           :: else -> skip
           fi
       }
       if
       :: !sawFlag ->
          lock();                             /* _update: admit, plan */
          admit();
          plan(start);
          returned++;                         /* returns after unlocking */
          unlock();
          if
          :: start -> run Worker(false)
          :: else -> skip
          fi
       :: else -> skip
       fi;
       added++
    :: added == JOBS -> break
    od
}

/* isSuspended = true / false, through _update. */
inline setSuspended(value) {
    lock();
    admit();
    suspended = value;
    plan(start);
    unlock();
    if
    :: start -> run Worker(false)
    :: else -> skip
    fi
}

proctype Controller() {
    bool start = false;
    if
    :: SUSPEND == 2 -> setSuspended(true)
    :: else -> skip
    fi;
    setSuspended(false)
}

/* waitUntilAllJobsAreFinished() */
proctype Waiter() {
    bool start = false;
    lock();
    admit();
    plan(start);
    if
    :: unsettled == 0 -> skip
    :: else -> waiting = true
    fi;
    unlock();
    if
    :: start -> run Worker(false)                  /* perform(), then block */
    :: else -> skip
    fi;
    (!waiting)
}

init {
    byte i = 0;
    atomic {
        do
        :: i < PRODUCERS -> run Producer(); i++
        :: i == PRODUCERS -> break
        od;
        if
        :: SUSPEND != 0 -> run Controller()
        :: else -> skip
        fi;
        if
        :: WAIT != 0 -> run Waiter()
        :: else -> skip
        fi
    }
    /* Everything else has ended or is blocked: every job must have run, and nothing be left. */
    timeout ->
    assert(ran == PRODUCERS * JOBS);
    assert(pushed == 0 && ready == 0 && executing == 0 && unsettled == 0 && idle == 0);
    assert(running == 0 && standby == 0);
    assert(!locked)
}
