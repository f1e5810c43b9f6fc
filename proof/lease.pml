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

/* ---- the workers' memory ----------------------------------------------- */

byte tok[3];	/* fence of the token the worker holds; 0: none           */
byte rtok[3];	/* token of a release the worker sent that the network
		 * may deliver (again) at any later time; 0: none         */

/* ---- ghost state: observation only, never read by a worker or the DB --- */

byte gen;	/* lease generations created so far (acquire + revoke);
		 * never reset, so it names a generation even where the
		 * fence does not (NAIVE_DELETE); elsewhere gen == l_fence */
byte tgen[3];	/* generation of tok[i]                                 */
byte rgen[3];	/* generation of rtok[i]                                */
byte maxf;	/* highest fence the database ever issued                 */
byte iss_f;	/* fence issued by the latest acquire/revoke              */
byte iss_prev;	/* maxf just before that                                  */
byte v_gen;	/* generation of the write that set v_fence               */
byte v_maxgen;	/* gen (newest generation) when that write committed      */
byte r_tgen;	/* last renew/release that changed the row: the caller's  */
byte r_gen;	/*   token generation, and the generation it changed      */

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

/* acquire: insert at fence 1 if absent, take over if leased_until <= now;
 * every success is fence + 1. Blocked = AcquireWait polling (a refused
 * attempt changes nothing). gen < GMAX bounds the model. */
inline acquire(i)
{
	atomic {
		l_left == 0 && gen < GMAX ->
		iss_prev = maxf;
		l_fence++;
		l_owner = OWNER(i);
		l_left = TTL;
		gen++;
		tok[i] = l_fence;
		tgen[i] = gen;
		iss_f = l_fence;
		if
		:: l_fence > maxf -> maxf = l_fence
		:: else -> skip
		fi;
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
			r_gen = gen;
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
			r_gen = gen;
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
	v_maxgen = gen;
	printf("MSC: W%d WRITE COMMITTED with fence %d (lease is at fence %d, newest generation %d)\n", i, tok[i], l_fence, gen)
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
	:: atomic { l_left > 0 -> l_left--; printf("MSC: tick\n") }
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
		iss_prev = maxf;
		l_fence++;
		l_owner = 0;
		l_left = 0;
		gen++;
		iss_f = l_fence;
		if
		:: l_fence > maxf -> maxf = l_fence
		:: else -> skip
		fi;
		printf("MSC: operator revoke -> fence %d\n", l_fence)
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

ltl safety		{ [] (P_MUTEX && P_MONOTONIC && P_NO_STALE && P_INERT) }
ltl mutex		{ [] P_MUTEX }
ltl monotonic		{ [] P_MONOTONIC }
ltl no_stale_commit	{ [] P_NO_STALE }
ltl old_token_inert	{ [] P_INERT }
