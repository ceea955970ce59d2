/**
 * The claim and the plain end of a job as functions in the database (docs/formats.md#the-claim):
 * one call, one round trip each, and the plans of their statements kept per connection, where
 * the statements they replace were planned again at every claim and every end (planning cost
 * more of the server than running them). The queue calls them (src/fleet/queue/claim-statement.ts,
 * job-end.ts); what they decide is said there.
 *
 * Both run with generic plans (plan_cache_mode, for the call and what it calls: fleet_spent_cap,
 * the triggers). Left to choose, PostgreSQL planned their statements afresh at every call (a
 * plan for the parameters' values looked cheaper than one for any), and planning a statement
 * on fleet_jobs locks each of its dozen indexes: past 16 relations a transaction's locks leave
 * the per-backend fast path for the shared lock table, on whose locks 64 claimers queued. A
 * generic plan locks what it uses: a claim about ten relations, an end about fifteen.
 */

import { claimNeedSql } from './spend.js'

/** The advisory lock claims with fleet.limits.per_user take turns on (pg-schema.ts's LOCK_KEYS.claimPerUser). */
export const CLAIM_PER_USER_LOCK = 0x637478_04

/** SQL: whether the jobs of user `u` (an SQL expression; NULL: the worker's OS user) are held by the fleet's daily cap, by the ClaimBudget `b` (NULL: no figures, everyone's are). */
const fleetCapped = (u: string) => `(b IS NULL OR (COALESCE(b->'users'->${u}, b->'all')->>'fleet') IS NOT NULL)`

/** SQL: a job `t` the claim may take now (waiting, or retrying with its time come), in the order of idx_fleet_jobs_claimable. */
const due = (t: string) => `${t}.state IN ('waiting', 'retrying') AND (${t}.state = 'waiting' OR ${t}.next_run_at <= now())`

/**
 * fleet_claim(worker, per_user, idle_channel, stale, b): the next job due, now `worker`'s, or no row.
 *
 * It takes the first due job in the queue's order (FOR UPDATE SKIP LOCKED: claimers never wait
 * on each other; with `per_user`, a user with that many running is passed over and claims take
 * turns on a transaction-scoped lock) and asks whether its user is held back by a cost cap:
 * their spend by the caps in `b` (a ClaimBudget, claim-budget.ts; NULL: no cap configured, no
 * spend read) is past a threshold (fleet_spent_cap: one read of their key of user_spend, and of
 * the fleet's day once per call, only when the fleet's cap applies), or one of their jobs
 * already waits for a user-daily or user-monthly window, or, when the fleet's cap applies to
 * them, a job waits for fleet-daily. A held user's due jobs, all of them that no other claim
 * holds, are made to wait for that window until its reset (or the same time as the wait that
 * holds them): `retrying`, wait_reason budget, no attempt spent, so that each says why and
 * until when (docs/fleet-operations.md#waits); then it takes the next. Each turn makes at least
 * the job it looked at wait, so the loop ends.
 *
 * The claimed job's wait goes to the queue wait histogram's log (queue-waits.ts), and its
 * claims counter's row to the counters' log by the trigger (fleet-tallies.ts). With an idle
 * channel, a call that found nothing puts the worker's row in fleet_idle, one that found a job
 * takes it out.
 */
const CLAIM_FUNCTION = `
  CREATE OR REPLACE FUNCTION fleet_claim(worker TEXT, per_user INTEGER, idle_channel TEXT, stale DOUBLE PRECISION, b JSONB)
  RETURNS SETOF fleet_jobs LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
  DECLARE
    pick_id BIGINT;
    pick_user TEXT;
    job fleet_jobs;
    held_cap TEXT;
    held_until TIMESTAMPTZ;
    fleet_usd DOUBLE PRECISION;
    pick_need DOUBLE PRECISION;
  BEGIN
    IF per_user IS NOT NULL THEN PERFORM pg_advisory_xact_lock(${CLAIM_PER_USER_LOCK}); END IF;
    LOOP
      SELECT c.id, COALESCE(c."user", b->>'os_user') INTO pick_id, pick_user FROM fleet_jobs c
      WHERE ${due('c')}
        AND (per_user IS NULL OR c."user" IS NULL OR (SELECT count(*) FROM fleet_jobs r WHERE r.state = 'running' AND r."user" = c."user") < per_user)
      ORDER BY c.priority DESC, c.id FOR UPDATE SKIP LOCKED LIMIT 1;
      EXIT WHEN pick_id IS NULL;
      held_cap := NULL;
      held_until := NULL;
      IF b IS NOT NULL THEN
        IF fleet_usd IS NULL AND (COALESCE(b->'users'->pick_user, b->'all')->>'fleet') IS NOT NULL THEN
          SELECT coalesce(sum(s.usd), 0) INTO fleet_usd FROM user_spend s WHERE s.day = b->>'day';
        END IF;
        -- Its first request's prompt counted as run's check at start counts it: a resume's window (spend.ts claimNeedSql).
        SELECT ${claimNeedSql('c', 'b')} INTO pick_need FROM fleet_jobs c WHERE c.id = pick_id;
        held_cap := fleet_spent_cap(pick_user, b, fleet_usd, pick_need);
      END IF;
      IF held_cap IS NULL THEN
        -- A window the user's other jobs, or the fleet's, already wait for: theirs first.
        SELECT w.wait_cap, w.next_run_at INTO held_cap, held_until FROM fleet_jobs w
        WHERE w.state = 'retrying' AND w.wait_reason = 'budget' AND w.next_run_at > now()
          AND ((w.wait_cap IN ('user-daily', 'user-monthly') AND w."user" = pick_user) OR (w.wait_cap = 'fleet-daily' AND ${fleetCapped('pick_user')}))
        ORDER BY w.wait_cap = 'fleet-daily', w.next_run_at DESC LIMIT 1;
      END IF;
      EXIT WHEN held_cap IS NULL;
      held_until := greatest(COALESCE(held_until, (b->>CASE held_cap WHEN 'user-monthly' THEN 'monthly_until' ELSE 'daily_until' END)::timestamptz),
                             now() + interval '1 second');
      UPDATE fleet_jobs h SET state = 'retrying', wait_reason = 'budget', wait_cap = held_cap, next_run_at = held_until
      WHERE h.id IN (
        SELECT l.id FROM fleet_jobs l
        WHERE ${due('l')}
          AND CASE WHEN held_cap = 'fleet-daily' THEN ${fleetCapped(`COALESCE(l."user", b->>'os_user')`)} ELSE COALESCE(l."user", b->>'os_user') = pick_user END
        FOR UPDATE SKIP LOCKED);
    END LOOP;
    IF pick_id IS NULL THEN
      IF idle_channel IS NOT NULL THEN
        INSERT INTO fleet_idle (channel, worker_id, stale_seconds) VALUES (idle_channel, worker, stale) ON CONFLICT (channel) DO NOTHING;
      END IF;
      RETURN;
    END IF;
    UPDATE fleet_jobs j SET state = 'running', claimed_by = worker, claimed_at = now(), attempts = j.attempts + 1, next_run_at = NULL
    WHERE j.id = pick_id RETURNING j.* INTO job;
    INSERT INTO fleet_queue_wait_log (waited) VALUES (greatest(0, extract(epoch FROM now() - COALESCE(job.ready_at, job.created_at)))::float8);
    IF idle_channel IS NOT NULL THEN DELETE FROM fleet_idle i WHERE i.channel = idle_channel; END IF;
    RETURN NEXT job;
  END $$;`

/**
 * fleet_end(id, worker, attempt, state, outcome, error, reason, cap, resume): ends the claim
 * `worker` holds of job `id` (its attempt `attempt`) as `state` (done or failed) with its history's
 * row, and queues its resume when `resume` (unless its task has an open job): what endJob does
 * for an end that is neither a retry nor a wait, in one call. False, changing nothing, when the
 * job is not in that claim or an operator asked to cancel it: the caller then ends it in a
 * transaction of its own, which says which.
 */
const END_FUNCTION = `
  CREATE OR REPLACE FUNCTION fleet_end(job_id BIGINT, worker TEXT, attempt INTEGER, end_state TEXT, end_outcome TEXT, end_error TEXT,
                                       end_reason TEXT, end_cap TEXT, resume BOOLEAN)
  RETURNS BOOLEAN LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $$
  DECLARE
    job fleet_jobs;
  BEGIN
    UPDATE fleet_jobs j SET state = end_state, finished_at = now(), outcome = end_outcome, error = end_error, wait_reason = NULL, wait_cap = NULL
    WHERE j.id = job_id AND j.state = 'running' AND j.claimed_by = worker AND j.attempts = attempt AND j.cancel_requested_at IS NULL
    RETURNING j.* INTO job;
    IF NOT FOUND THEN RETURN false; END IF;
    INSERT INTO fleet_job_attempts (job_id, attempt, worker_id, hostname, started_at, outcome, reason, cap, error, again)
    VALUES (job.id, job.attempts, job.claimed_by, COALESCE((SELECT w.hostname FROM fleet_workers w WHERE w.id = job.claimed_by), split_part(job.claimed_by, ':', 1)),
            job.claimed_at, left(end_outcome, 100), end_reason, end_cap, end_error, resume);
    IF resume THEN
      INSERT INTO fleet_jobs (task_uuid, kind, spec, priority, "user") VALUES (job.task_uuid, 'resume', job.spec, job.priority, COALESCE(job."user", job.spec->>'user'))
      ON CONFLICT DO NOTHING;
    END IF;
    RETURN true;
  END $$;`

/**
 * The migration: the two functions; an index over the jobs that wait for a budget window,
 * which the claim looks in for a user's (or the fleet's) window at each claim: small (only
 * those jobs), where the index on every retrying job's time grew with every wait for a usage
 * limit. And the counters' adding function (fleet-tallies.ts), which the triggers call at
 * every claim and end, in PL/pgSQL: its INSERT planned once per connection (an SQL function's
 * was planned at each call). It takes no lock on a table the fleet's transactions hold (no
 * trigger is made again, which would wait for every one of them and deadlock with one that
 * waits for the migration, storage/index/fleet-counters.ts says how).
 */
export const PG_FLEET_CLAIM_MIGRATION = `${CLAIM_FUNCTION}
  ${END_FUNCTION}
  CREATE INDEX IF NOT EXISTS idx_fleet_jobs_budget_waits ON fleet_jobs(wait_cap, "user", next_run_at) WHERE state = 'retrying' AND wait_reason = 'budget';
  CREATE OR REPLACE FUNCTION fleet_counters_add(TEXT, TEXT) RETURNS void LANGUAGE plpgsql AS $$
  BEGIN
    INSERT INTO fleet_counter_log (name, label) VALUES ($1, $2);
  END $$;`
