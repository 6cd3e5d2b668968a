/*
 * A model of the engine lock (_Lock.swift), for spin.
 *
 * The lock is one word, `state`: 0 free, 1 held, 2 held and a thread may be asleep. A thread takes
 * a free lock with a compare-and-swap 0 -> 1. One that finds it held re-reads it a bounded number
 * of times (SPINS here, 10,000 in the code), trying the compare-and-swap whenever it reads 0; then
 * it locks the `sleepers` mutex and, while an exchange of 2 into `state` returns nonzero, waits on
 * the condition variable `wakeup`; it unlocks `sleepers` once the exchange returned 0. A release
 * exchanges 0 into `state` and, if that returned 2, locks `sleepers`, signals `wakeup` and unlocks
 * `sleepers`.
 *
 * The condition variable: pthread_cond_wait releases the mutex and joins the wait set in one step,
 * and locks the mutex again once woken; pthread_cond_signal wakes one thread of the wait set, if
 * there is one. With SPURIOUS=1 a waiter may also wake by itself, which POSIX allows.
 *
 * Each atomic operation on `state` is one step; Promela's interleaving is sequentially consistent.
 * The code's orderings (acquiring to take, releasing to release) are what carry the protected data
 * from one holder to the next; ThreadSanitizer checks that part (Docs/Reliability.md).
 *
 * Checked exhaustively (spin -a; cc -DSAFETY; ./pan):
 *   - mutual exclusion: no two threads hold the lock at once;
 *   - no lost wake-up: every thread takes the lock ROUNDS times and ends, so no thread is left
 *     asleep while the lock is free (spin reports a process blocked forever as an invalid end
 *     state); at the end the lock is free and no thread is asleep.
 * With SPURIOUS=1 only the first holds as a check: a waiter that may always wake by itself is never
 * blocked forever, so the second is checked with SPURIOUS=0.
 *
 * Configuration (spin -D...): SPINS (re-reads before sleeping), ROUNDS (acquisitions per thread),
 * SPURIOUS. Three threads.
 */

#ifndef SPINS
#define SPINS 1
#endif
#ifndef ROUNDS
#define ROUNDS 2
#endif
#ifndef SPURIOUS
#define SPURIOUS 0
#endif

#define THREADS 3

byte state = 0;           /* _Lock.state */
bool sleepersLocked = false;
bool asleep[THREADS];     /* in wakeup's wait set */
byte holders = 0;         /* threads between lock() and unlock() */

inline lockSleepers() {
    atomic { !sleepersLocked -> sleepersLocked = true }
}

inline unlockSleepers() {
    sleepersLocked = false
}

/* pthread_cond_signal: wakes one waiter, whichever the scheduler picks, if any. */
inline signalOne() {
    atomic {
        if
        :: asleep[0] -> asleep[0] = false
        :: asleep[1] -> asleep[1] = false
        :: asleep[2] -> asleep[2] = false
        :: else -> skip
        fi
    }
}

proctype Thread(byte me) {
    byte round = 0;
    byte reads = 0;
    byte old;
    do
    :: round < ROUNDS ->
        /* lock(): the fast path. */
        atomic {
            if
            :: state == 0 -> state = 1; goto acquired
            :: else -> skip
            fi
        }
        /* lockContended(): re-read, then sleep. */
        reads = 0;
        do
        :: reads < SPINS ->
            atomic {
                if
                :: state == 0 -> state = 1; goto acquired
                :: else -> skip
                fi
            }
            reads++
        :: else -> break
        od;
        lockSleepers();
        do
        :: atomic { old = state; state = 2 };
            if
            :: old == 0 -> break
            :: else ->
                /* pthread_cond_wait: release the mutex and join the wait set in one step. */
                atomic { asleep[me] = true; sleepersLocked = false };
                if
                :: !asleep[me] -> skip
#if SPURIOUS
                :: asleep[me] -> asleep[me] = false
#endif
                fi;
                lockSleepers()
            fi
        od;
        unlockSleepers();
acquired:
        holders++;
        assert(holders == 1);
        holders--;
        /* unlock() */
        atomic { old = state; state = 0 };
        if
        :: old == 2 ->
            lockSleepers();
            signalOne();
            unlockSleepers()
        :: else -> skip
        fi;
        round++
    :: else -> break
    od
}

init {
    atomic {
        run Thread(0);
        run Thread(1);
        run Thread(2)
    }
    (_nr_pr == 1);
    assert(state == 0 && !sleepersLocked && !asleep[0] && !asleep[1] && !asleep[2])
}
