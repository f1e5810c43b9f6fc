/*
 * lease.pml: a Promela model of fence's fenced lease (see proof/README.md).
 *
 * One lease row, a protected value written by the job, a database clock,
 * NW workers, an operator who revokes and a network that delivers a worker's
 * release again later. spin explores every interleaving. The scheduler is
 * adversarial: it may leave any worker unscheduled ("paused") for as long as
 * it likes while the clock and the others go on.
 *
 * Variants, chosen at compile time (spin -a -D...):
 *   (none)          FENCED: the design. The final write checks owner, fence
 *                   and leased_until in the statement that writes.
 *   -DNAIVE_CTA     the article's `if (lease.isHeld()) { run.setFinished(true); }`:
 *                   an exact IsHeld in one step, a plain write in a later one.
 *   -DNAIVE_OWNER   the article's "checks only lease_name or owner_token": the
 *                   write is one conditional statement on owner_token and
 *                   leased_until, but not fence_token.
 *   -DNAIVE_RELEASE release checks owner_token and leased_until but not
 *                   fence_token (etcd-io/etcd#22082: a retried release of an
 *                   old lease ended the newer one). The write stays fenced.
 *   -DNAIVE_DELETE  release deletes the row, so the next acquisition starts
 *                   again at fence 1 (what ADR 0001 decision 1 rules out).
 *                   Implies -DPLUS_ONE: with the floor rule a deleted row
 *                   would be re-inserted above the clock.
 *   -DPLUS_ONE      the fence rule before issue 13: a new fence is always
 *                   fence + 1 (insert at 1). The design is the floor rule,
 *                   fence = max(fence + 1, the database clock).
 * Rollback (-DROLLBACK=n): the database goes back to an earlier state up to n
 * times (a restored dump, a promoted asynchronous replica), and a downstream
 * checker accepts fences. The floor rule's two clock assumptions (ADR 0004),
 * each removed by a control: -DCLOCK_BACK, the clock goes back with the data
 * (a); -DCLOCK_STALL, the clock need not move between two fences, so fences
 * can run ahead of it (b).
 * Bounds: -DNW=2|3 workers, -DGMAX=n lease generations (acquisitions plus
 * revokes), -DTTL=n clock ticks, -DNO_REVOKE (no operator).
 *
 * Properties: the ltl blocks at the end; pan -N <name> picks one.
 */

#ifndef NW
#define NW 2
#endif
#ifndef GMAX
#define GMAX 4
#endif
#ifndef TTL
#define TTL 2
#endif
#ifdef NAIVE_DELETE
#define PLUS_ONE
#endif
/* Fence values: at most one per generation, and the clock (which the floor
 * rule reads) advances once per generation. Arrays indexed by fence. */
#define FMAX	(GMAX + 1)

/*
 * Owner tokens. fence gives every acquisition a fresh random owner_token; the
 * model gives the coarser identity of the *instance* that runs the worker:
 * W0 and W1 run on instance A (1), W2 on instance B (2). So two attempts of
 * one instance share an owner, as in a lease table keyed by hostname. Every
 * check that a random owner passes, this owner passes too, so the fenced
 * variant's safety here implies its safety with random owners; and the naive
 * variants get their realistic failure: a stalled attempt of instance A and
 * A's next attempt look the same to an owner-only check.
 */
#define OWNER(i)	((i) / 2 + 1)	/* W0, W1 -> 1 (A); W2 -> 2 (B) */

/* ---- the database ------------------------------------------------------ */

/* The lease row (<prefix>leases). l_fence == 0: the row does not exist. */
byte l_owner;	/* owner_token; 0 is '' (after revoke)                   */
byte l_fence;	/* fence_token                                           */
byte l_left;	/* leased_until_ms - now, clamped at 0: valid iff > 0     */

/* The protected value: the row the job's final write updates (a run's
 * status, the reconciliation result). v_fence is the fence it carries. */
byte v_fence;

/* The database clock, as the floor rule reads it ({{now_us}}). Only the order
 * of its readings matters (the rule compares it with fences and takes the
 * larger), so the model advances it by exactly one at each statement that
 * creates a fence: the assumption that the clock, in microseconds, moves
 * between two such statements, which each take a round trip and the row
 * lock. It is not part of the database's state: a rollback of the data does
 * not take it back (it may be behind by a bounded skew on another server;
 * the rollback's own duration exceeds that skew, see proof/README.md), except
 * under -DCLOCK_BACK. The expiry ticks (l_left) are a separate, finer view of
 * the same clock; a tick between two fences changes no comparison here. */
byte clk;

/* ---- the workers' memory ----------------------------------------------- */

byte tok[3];	/* fence of the token the worker holds; 0: none           */
byte rtok[3];	/* token of a release the worker sent that the network
		 * may deliver (again) at any later time; 0: none         */

/* ---- ghost state: observation only, never read by a worker or the DB --- */

byte gen;	/* lease generations created so far (acquire + revoke);
		 * never reset, not even by a rollback, so it names a
		 * generation even where the fence does not (NAIVE_DELETE,
		 * PLUS_ONE after a rollback); without a rollback it equals
		 * l_fence in the other variants */
byte tgen[3];	/* generation of tok[i]                                 */
byte rgen[3];	/* generation of rtok[i]                                */
byte maxf;	/* highest fence the database ever issued                 */
byte iss_f;	/* fence issued by the latest acquire/revoke              */
byte iss_prev;	/* maxf just before that                                  */
byte v_gen;	/* generation of the write that set v_fence               */
byte v_maxgen;	/* hgen (newest generation) when that write committed     */
byte hgen;	/* the generation the lease row is at: gen, until a
		 * rollback takes the row (and this) back to a snapshot   */
byte f_gen[FMAX + 1];	/* f_gen[f]: the generation that got fence f       */
bool f_dup;	/* a fence was issued to a second generation              */
byte r_tgen;	/* last renew/release that changed the row: the caller's  */
byte r_gen;	/*   token generation, and the generation it changed      */

#ifdef ROLLBACK
/* ---- rollback: a snapshot of the database, and a downstream checker ------ */

/* The snapshot: what a dump holds, or what an asynchronous replica has
 * replayed. All of the database's state, ghosts included; s_left ticks down
 * with the clock, since leased_until is an absolute time. */
byte s_owner, s_fence, s_left, s_vfence, s_vgen, s_vmaxgen, s_hgen;
byte s_clk;	/* the clock when the snapshot was taken (CLOCK_BACK only) */
bool s_taken;	/* a snapshot is there to roll back to */
byte nrb;	/* rollbacks so far */

/* The downstream checker (ExecResource, a storage system that compares
 * fences): accepts a fence >= the highest it accepted, remembers which
 * owner (acquisition, i.e. generation) each accepted fence came from. */
byte c_max;
byte c_gen[FMAX + 1];
bool c_dup;	/* it accepted a fence it had accepted from another owner */
#endif

/* ---- statements (each is one atomic database step) --------------------- */

/* valid(o, f): "owner = o AND fence = f AND leased_until > now" */
#define VALID(o, f)	(l_owner == (o) && l_fence == (f) && l_left > 0)

/* The conditions of renew and release: owner, fence and leased_until. */
#define RENEW_COND(i, f)	VALID(OWNER(i), f)
#ifdef NAIVE_RELEASE
#define RELEASE_COND(i, f)	(l_owner == OWNER(i) && l_left > 0)
#else
#define RELEASE_COND(i, f)	VALID(OWNER(i), f)
#endif

/* A new fence for the row (insert, takeover, revoke), as one step of the
 * statement that creates it; records who got it. l_fence == 0 (no row) makes
 * both rules insert at max(1, clock) or 1. */
inline new_fence()
{
	iss_prev = maxf;
#ifdef CLOCK_STALL
	if			/* the clock may not have moved since the last fence */
	:: clk++
	:: skip
	fi;
#else
	clk++;
#endif
#ifdef PLUS_ONE
	l_fence++;
#else
	if
	:: l_fence + 1 >= clk -> l_fence++
	:: else -> l_fence = clk
	fi;
#endif
	gen++;
	hgen = gen;
	iss_f = l_fence;
	if
	:: l_fence > maxf -> maxf = l_fence
	:: else -> skip
	fi;
	if
	:: f_gen[l_fence] != 0 -> f_dup = true
	:: else -> skip
	fi;
	f_gen[l_fence] = gen
}

/* acquire: insert if absent, take over if leased_until <= now, with a new
 * fence. Blocked = AcquireWait polling (a refused attempt changes nothing).
 * gen < GMAX bounds the model. */
inline acquire(i)
{
	atomic {
		l_left == 0 && gen < GMAX ->
		new_fence();
		l_owner = OWNER(i);
		l_left = TTL;
		tok[i] = l_fence;
		tgen[i] = gen;
		printf("MSC: W%d acquire -> fence %d (generation %d)\n", i, l_fence, gen)
	}
}

/* renew: leased_until = now + ttl where the condition holds; else ErrLost. */
inline renew(i)
{
	atomic {
		if
		:: RENEW_COND(i, tok[i]) ->
			r_tgen = tgen[i];
			r_gen = hgen;
			l_left = TTL;
			printf("MSC: W%d renew fence %d ok\n", i, tok[i])
		:: !RENEW_COND(i, tok[i]) ->
			printf("MSC: W%d renew fence %d: lost\n", i, tok[i])
		fi
	}
}

/* release with token fence f (ghost generation g): leased_until = 0, the
 * row stays (NAIVE_DELETE: the row is deleted). */
inline release(i, f, g)
{
	atomic {
		if
		:: RELEASE_COND(i, f) ->
			r_tgen = g;
			r_gen = hgen;
			l_left = 0;
#ifdef NAIVE_DELETE
			l_fence = 0;
			l_owner = 0;
#endif
			printf("MSC: W%d release fence %d ok\n", i, f)
		:: !RELEASE_COND(i, f) ->
			printf("MSC: W%d release fence %d: refused\n", i, f)
		fi
	}
}

/* A committed write of the protected value by worker i. */
inline commit(i)
{
	v_fence = tok[i];
	v_gen = tgen[i];
	v_maxgen = hgen;
	printf("MSC: W%d WRITE COMMITTED with fence %d (lease is at fence %d, newest generation %d)\n", i, tok[i], l_fence, hgen)
}

/*
 * The job's final (or any progress) write.
 * FENCED: one statement, `UPDATE … WHERE … AND {{fence}}` / FinishRun /
 * InTx: check and write are one atomic step at the database.
 */
inline write(i)
{
#if defined(NAIVE_CTA)
	/* if (lease.isHeld()) { run.setFinished(true); } */
	atomic {
		ok = VALID(OWNER(i), tok[i]);
		printf("MSC: W%d IsHeld(fence %d) = %d\n", i, tok[i], ok)
	};
	/* <- the worker may be paused right here */
	atomic {
		if
		:: ok -> commit(i)
		:: else -> skip
		fi
	}
#elif defined(NAIVE_OWNER)
	atomic {
		if
		:: l_owner == OWNER(i) && l_left > 0 -> commit(i)
		:: !(l_owner == OWNER(i) && l_left > 0) ->
			printf("MSC: W%d write fence %d: rejected\n", i, tok[i])
		fi
	}
#else
	atomic {
		if
		:: VALID(OWNER(i), tok[i]) -> commit(i)
		:: !VALID(OWNER(i), tok[i]) ->
			printf("MSC: W%d write fence %d: rejected (ErrLost)\n", i, tok[i])
		fi
	}
#endif
}

#ifdef ROLLBACK
/* Worker i writes to the downstream resource with its token, whatever the
 * lease says now: the checker's fence comparison is the only guard there. */
inline send(i)
{
	atomic {
		if
		:: tok[i] >= c_max ->
			if
			:: c_gen[tok[i]] != 0 && c_gen[tok[i]] != tgen[i] ->
				c_dup = true;
				printf("MSC: W%d CHECKER ACCEPTED fence %d from generation %d, already accepted from generation %d\n", i, tok[i], tgen[i], c_gen[tok[i]])
			:: else ->
				printf("MSC: W%d checker accepted fence %d (generation %d)\n", i, tok[i], tgen[i])
			fi;
			c_gen[tok[i]] = tgen[i];
			c_max = tok[i]
		:: else ->
			printf("MSC: W%d checker refused fence %d (it accepted %d)\n", i, tok[i], c_max)
		fi
	}
}
#endif

/* A delayed or retried copy of worker i's last release arrives. */
#define REDELIVER(i)	rtok[i] != 0 -> release(i, rtok[i], rgen[i])

proctype Worker(byte i)
{
	bool ok;

end_idle:
	do
	:: acquire(i); break
	:: REDELIVER(i)
	od;

	/* The job. Every step may be taken whatever the previous ones
	 * returned: a lost renewal cancels the job's context, but cancellation
	 * is a signal, not a fence; the job may still try to write. */
	do
	:: renew(i)
	:: write(i)
#ifdef ROLLBACK
	:: send(i)
#endif
	:: REDELIVER(i)
	:: break			/* done, or gave up */
	od;

	/* Release (Runner: releaseQuietly), maybe delivered now and again
	 * later, maybe only later, or never (crash: the lease expires). */
	atomic {
		if
		:: true -> skip
		:: true -> release(i, tok[i], tgen[i])
		fi;
		rtok[i] = tok[i];
		rgen[i] = tgen[i]
	};
	atomic { tok[i] = 0; tgen[i] = 0 };
	goto end_idle
}

/* The database clock. A tick moves now forward; only leased_until - now is
 * stored, so the state space stays finite while time is unbounded. */
active proctype Clock()
{
end:
	do
#ifndef ROLLBACK
	:: atomic { l_left > 0 -> l_left--; printf("MSC: tick\n") }
#else
	/* leased_until in the snapshot is an absolute time too: the same tick
	 * brings it closer to expiry, so a restored lease is as old as the
	 * time that has passed since the snapshot makes it. */
	:: atomic {
		l_left > 0 || s_left > 0 ->
		if
		:: l_left > 0 -> l_left--
		:: else -> skip
		fi;
		if
		:: s_left > 0 -> s_left--
		:: else -> skip
		fi;
		printf("MSC: tick\n")
	   }
#endif
	od
}

/* An operator: revoke(name) takes a fence of its own and clears the owner.
 * -DNO_REVOKE leaves it out (the article's scenario needs no operator). */
#ifndef NO_REVOKE
active proctype Operator()
{
end:
	do
	:: atomic {
		l_fence > 0 && gen < GMAX ->
		new_fence();
		l_owner = 0;
		l_left = 0;
		printf("MSC: operator revoke -> fence %d (generation %d)\n", l_fence, gen)
	   }
	od
}
#endif

#ifdef ROLLBACK
/* The database goes back in time. `snapshot`: a dump is taken, or the
 * asynchronous replica replays up to this instant (it may do so any number
 * of times, or never). `rollback`: the dump is restored, or the replica is
 * promoted after the primary died; every commit after the snapshot is gone.
 * The workers, the network and the checker are outside the database and
 * keep what they had. One snapshot per rollback is as general as a replica
 * that replays any number of times: only the last state replayed before the
 * promotion matters, and the scheduler picks when that was (the empty
 * database included, a snapshot taken before the first step). */
active proctype Backup()
{
end:
	do
	:: atomic {
		!s_taken ->
		s_taken = true;
		s_owner = l_owner; s_fence = l_fence; s_left = l_left;
		s_vfence = v_fence; s_vgen = v_gen; s_vmaxgen = v_maxgen;
		s_hgen = hgen; s_clk = clk;
		printf("MSC: snapshot at fence %d\n", l_fence)
	   }
	:: atomic {
		s_taken && nrb < ROLLBACK ->
		nrb++;
		s_taken = false;
		l_owner = s_owner; l_fence = s_fence; l_left = s_left;
		v_fence = s_vfence; v_gen = s_vgen; v_maxgen = s_vmaxgen;
		hgen = s_hgen;
#ifdef CLOCK_BACK
		clk = s_clk;
#endif
		printf("MSC: ROLLBACK to the snapshot: lease row at fence %d, highest fence issued %d\n", l_fence, maxf)
	   }
	od
}
#endif

init
{
	atomic {
		byte n = 0;
		do
		:: n < NW -> run Worker(n); n++
		:: else -> break
		od
	}
}

/* ---- properties ---------------------------------------------------------- */

/* Invariant 1: at any database instant at most one (owner, fence) pair that a
 * worker holds is valid. */
#define HOLDS(i)	(tok[i] != 0 && VALID(OWNER(i), tok[i]))
#define P_MUTEX		(HOLDS(0) + HOLDS(1) + HOLDS(2) <= 1)

/* Invariant 2: each acquisition or revoke issues a fence greater than every
 * fence issued before it. */
#define P_MONOTONIC	(iss_f == 0 || iss_f > iss_prev)

/* Invariant 3: a write from generation g never commits after a generation
 * newer than g was created. Checked in every state against the record of the
 * last commit, so every commit is checked. */
#define P_NO_STALE	(v_gen >= v_maxgen)

/* A renew or release only ever changes the caller's own generation. */
#define P_INERT		(r_tgen == r_gen)

/* No fence value is ever issued to two generations (two owners), across
 * rollbacks too. Implied by P_MONOTONIC; stated on its own because it is the
 * promise users rely on. */
#define P_UNIQUE	(!f_dup)

/* The downstream checker never accepts a fence it already accepted from
 * another owner. */
#ifdef ROLLBACK
#define P_CHECKER	(!c_dup)
#else
#define P_CHECKER	true
#endif

ltl safety		{ [] (P_MUTEX && P_MONOTONIC && P_NO_STALE && P_INERT && P_UNIQUE && P_CHECKER) }
ltl mutex		{ [] P_MUTEX }
ltl monotonic		{ [] P_MONOTONIC }
ltl no_stale_commit	{ [] P_NO_STALE }
ltl old_token_inert	{ [] P_INERT }
ltl fence_unique	{ [] P_UNIQUE }
ltl checker_unique	{ [] P_CHECKER }
