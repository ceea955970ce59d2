import type { Pool } from 'pg'
import {
  COUNTER_COLUMNS,
  DELIVERED_COUNTERS,
  DELIVERY_COUNTERS,
  ENVIRONED_COUNTERS,
  FIRST_COUNTERS,
  LATER_COUNTERS,
  LATER_TASK_COLUMNS,
  SECOND_COUNTERS,
  SUMMARY_COUNTERS,
  SUMMARY_TASK_COLUMNS,
} from './counter-eras.js'
import type { CounterColumn } from './counter-eras.js'
import { applyRow, liveSums, LIVE_ROWS, TOOL_CALLS } from './totals.js'
import { ENV_COUNTERS } from './env-totals.js'
import type { Dialect, IndexTotals } from './totals.js'

/**
 * The totals of totals.ts in PostgreSQL: the same tables, kept by one row trigger on
 * `tasks`. A rebuild (reindex) sets `ctxagent.rebuilding` for its transaction (SET LOCAL,
 * which a pooler in transaction mode keeps to that transaction), so the trigger leaves
 * the totals to the rebuild's own sums.
 */
export const POSTGRES: Dialect = {
  user: '"user"',
  model: (r) => `ctxagent_model(${r}metadata)`,
  seconds: (r) => `ctxagent_seconds(${r}completed_at, COALESCE(${r}started_at, ${r}created_at))`,
  toolCalls: (r) => ({
    from: `ctxagent_tool_calls(${r}tool_calls, ${r}total_tool_calls) AS tc`,
    tool: 'tc.tool_name',
    outcome: 'tc.outcome_name',
    n: 'tc.n',
    where: 'true',
  }),
}

/** The migration: tables, helper functions (which never throw on a malformed row), the trigger, and the rows already there. */
export function pgTotalsMigration(): string {
  const d = POSTGRES
  const live = liveSums(d, FIRST_COUNTERS)
  return `
  CREATE TABLE IF NOT EXISTS task_totals (location TEXT NOT NULL, status TEXT NOT NULL, "user" TEXT NOT NULL, model TEXT NOT NULL,
    tasks BIGINT NOT NULL, disk_bytes BIGINT NOT NULL, disk_raw BIGINT NOT NULL, unmeasured BIGINT NOT NULL, PRIMARY KEY (location, status, "user", model));
  CREATE TABLE IF NOT EXISTS task_counters ("user" TEXT NOT NULL, model TEXT NOT NULL, ${FIRST_COUNTERS.map((c) => `${c} BIGINT NOT NULL`).join(', ')}, PRIMARY KEY ("user", model));
  CREATE TABLE IF NOT EXISTS task_durations (bucket INTEGER PRIMARY KEY, n BIGINT NOT NULL, total_ms BIGINT NOT NULL);
  CREATE OR REPLACE FUNCTION ctxagent_model(metadata TEXT) RETURNS TEXT LANGUAGE plpgsql IMMUTABLE AS $$
  BEGIN
    RETURN COALESCE(metadata::jsonb #>> '{config,model}', '');
  EXCEPTION WHEN others THEN RETURN '';
  END $$;
  CREATE OR REPLACE FUNCTION ctxagent_seconds(done TEXT, since TEXT) RETURNS DOUBLE PRECISION LANGUAGE plpgsql IMMUTABLE AS $$
  BEGIN
    RETURN EXTRACT(EPOCH FROM (done::timestamptz - since::timestamptz));
  EXCEPTION WHEN others THEN RETURN NULL;
  END $$;
  ${pgTotalsFunction(FIRST_COUNTERS)}
  DROP TRIGGER IF EXISTS tasks_totals ON tasks;
  CREATE TRIGGER tasks_totals AFTER INSERT OR UPDATE OR DELETE ON tasks FOR EACH ROW EXECUTE FUNCTION ctxagent_task_totals();
  DELETE FROM task_totals; DELETE FROM task_counters; DELETE FROM task_durations;
  INSERT INTO task_totals ${live.tasks};
  INSERT INTO task_counters ${live.counters};
  INSERT INTO task_durations ${live.durations};
  CREATE INDEX IF NOT EXISTS idx_tasks_user_created ON tasks("user", created_at, uuid);
  CREATE INDEX IF NOT EXISTS idx_tasks_status_created ON tasks(status, created_at, uuid);
  CREATE INDEX IF NOT EXISTS idx_tasks_location_created ON tasks(location, created_at, uuid);
  CREATE INDEX IF NOT EXISTS idx_tasks_created_uuid ON tasks(created_at, uuid);`
}

/** The totals' row trigger's function, counting `columns` (CREATE OR REPLACE: a later migration counts more). */
export function pgTotalsFunction(columns: readonly CounterColumn[]): string {
  const d = POSTGRES
  const all = ['tasks', 'counters', 'durations'] as ('tasks' | 'counters' | 'durations')[]
  const body = (statements: string[]) => statements.map((x) => `${x};`).join('\n      ')
  return `CREATE OR REPLACE FUNCTION ctxagent_task_totals() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    IF current_setting('ctxagent.rebuilding', true) = 'on' THEN RETURN NULL; END IF;
    IF TG_OP = 'DELETE' THEN
      ${body(applyRow(d, 'OLD.', -1, ['tasks'], columns))}
    ELSIF TG_OP = 'UPDATE' THEN
      ${body([...applyRow(d, 'OLD.', -1, all, columns), ...applyRow(d, 'NEW.', 1, all, columns)])}
    ELSE
      ${body(applyRow(d, 'NEW.', 1, all, columns))}
    END IF;
    IF TG_OP <> 'INSERT' THEN DELETE FROM task_totals WHERE tasks = 0; END IF;
    RETURN NULL;
  END $$;`
}

/**
 * Tool calls by tool and outcome (totals.ts's task_tool_calls): the column, the table, a
 * function that reads a row's tally (never throwing on a malformed one; no tally: its
 * total as unknown), and a trigger of its own on inserts and updates (a deleted row's
 * calls stay). The table starts as the tool call counter's whole, all unknown: no row
 * has a tally yet. ALTER TABLE locks `tasks` until the commit: no write falls between.
 */
export function pgToolCallsMigration(): string {
  const d = POSTGRES
  const body = (statements: string[]) => statements.map((x) => `${x};`).join('\n      ')
  return `
  ALTER TABLE tasks ADD COLUMN IF NOT EXISTS tool_calls TEXT;
  CREATE TABLE IF NOT EXISTS task_tool_calls (tool TEXT NOT NULL, outcome TEXT NOT NULL, n BIGINT NOT NULL, PRIMARY KEY (tool, outcome));
  CREATE OR REPLACE FUNCTION ctxagent_tool_calls(doc TEXT, total BIGINT) RETURNS TABLE (tool_name TEXT, outcome_name TEXT, n BIGINT) LANGUAGE plpgsql IMMUTABLE AS $$
  DECLARE parsed JSONB; t RECORD; o RECORD;
  BEGIN
    IF doc IS NULL THEN
      IF COALESCE(total, 0) <> 0 THEN tool_name := 'unknown'; outcome_name := 'unknown'; n := total; RETURN NEXT; END IF;
      RETURN;
    END IF;
    BEGIN
      parsed := doc::jsonb;
    EXCEPTION WHEN others THEN RETURN;
    END;
    IF jsonb_typeof(parsed) <> 'object' THEN RETURN; END IF;
    FOR t IN SELECT * FROM jsonb_each(parsed) LOOP
      CONTINUE WHEN jsonb_typeof(t.value) <> 'object';
      FOR o IN SELECT * FROM jsonb_each(t.value) LOOP
        CONTINUE WHEN jsonb_typeof(o.value) <> 'number';
        CONTINUE WHEN (o.value #>> '{}') !~ '^-?[0-9]{1,15}$';
        tool_name := t.key; outcome_name := o.key; n := (o.value #>> '{}')::bigint;
        IF n <> 0 THEN RETURN NEXT; END IF;
      END LOOP;
    END LOOP;
  END $$;
  CREATE OR REPLACE FUNCTION ctxagent_task_tool_calls() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    IF current_setting('ctxagent.rebuilding', true) = 'on' THEN RETURN NULL; END IF;
    IF TG_OP = 'UPDATE' THEN
      IF OLD.tool_calls IS NOT DISTINCT FROM NEW.tool_calls AND OLD.total_tool_calls IS NOT DISTINCT FROM NEW.total_tool_calls THEN RETURN NULL; END IF;
      ${body(applyRow(d, 'OLD.', -1, ['tools']))}
    END IF;
    ${body(applyRow(d, 'NEW.', 1, ['tools']))}
    RETURN NULL;
  END $$;
  DROP TRIGGER IF EXISTS tasks_tool_calls ON tasks;
  CREATE TRIGGER tasks_tool_calls AFTER INSERT OR UPDATE ON tasks FOR EACH ROW EXECUTE FUNCTION ctxagent_task_tool_calls();
  DELETE FROM task_tool_calls;
  INSERT INTO task_tool_calls (tool, outcome, n) SELECT 'unknown', 'unknown', SUM(tool_calls) FROM task_counters HAVING SUM(tool_calls) > 0;`
}

/** totals.ts's later counters in PostgreSQL: the columns, and the trigger's function made again to count them (ALTER TABLE holds `tasks` until the commit). */
export function pgCountersMigration(): string {
  return `
  ${LATER_TASK_COLUMNS.map((c) => `ALTER TABLE tasks ADD COLUMN IF NOT EXISTS ${c} BIGINT;`).join('\n  ')}
  ${LATER_COUNTERS.map((c) => `ALTER TABLE task_counters ADD COLUMN IF NOT EXISTS ${c} BIGINT NOT NULL DEFAULT 0;`).join('\n  ')}
  ${pgTotalsFunction(SECOND_COUNTERS)}`
}

/** totals.ts's deliveries in PostgreSQL (sqliteDeliveriesMigration's twin). */
export function pgDeliveriesMigration(): string {
  return `
  ALTER TABLE tasks ADD COLUMN IF NOT EXISTS delivery_result TEXT;
  ${DELIVERY_COUNTERS.map((c) => `ALTER TABLE task_counters ADD COLUMN IF NOT EXISTS ${c} BIGINT NOT NULL DEFAULT 0;`).join('\n  ')}
  ${pgTotalsFunction(DELIVERED_COUNTERS)}`
}

/** totals.ts's environments' counters in PostgreSQL (sqliteEnvMigration's twin). */
export function pgEnvMigration(): string {
  return `
  ALTER TABLE tasks ADD COLUMN IF NOT EXISTS env_cache TEXT;
  ALTER TABLE tasks ADD COLUMN IF NOT EXISTS env_setup_ms BIGINT;
  ${ENV_COUNTERS.map((c) => `ALTER TABLE task_counters ADD COLUMN IF NOT EXISTS ${c} BIGINT NOT NULL DEFAULT 0;`).join('\n  ')}
  ${pgTotalsFunction(ENVIRONED_COUNTERS)}`
}

/** totals.ts's summaries' tokens in PostgreSQL (sqliteSummaryTokensMigration's twin). */
export function pgSummaryTokensMigration(): string {
  return `
  ${SUMMARY_TASK_COLUMNS.map((c) => `ALTER TABLE tasks ADD COLUMN IF NOT EXISTS ${c} BIGINT;`).join('\n  ')}
  ${SUMMARY_COUNTERS.map((c) => `ALTER TABLE task_counters ADD COLUMN IF NOT EXISTS ${c} BIGINT NOT NULL DEFAULT 0;`).join('\n  ')}
  ${pgTotalsFunction(COUNTER_COLUMNS)}`
}

const n = (v: unknown): number => Number(v ?? 0)

/** The totals as /metrics reads them, from PostgreSQL (a few dozen rows: no copy of the index). */
export async function pgTotals(pool: Pool): Promise<IndexTotals> {
  const [tasks, counters, durations, tools, live] = await Promise.all([
    pool.query<Record<string, unknown>>('SELECT * FROM task_totals WHERE tasks > 0'),
    pool.query<Record<string, unknown>>('SELECT * FROM task_counters'),
    pool.query<Record<string, unknown>>('SELECT * FROM task_durations ORDER BY bucket'),
    pool.query<{ tool: string; outcome: string; n: string }>(TOOL_CALLS),
    pool.query<IndexTotals['live'][number]>(LIVE_ROWS),
  ])
  return {
    tasks: tasks.rows.map(
      (r) =>
        ({
          location: r.location,
          status: r.status,
          user: r.user,
          model: r.model,
          tasks: n(r.tasks),
          disk_bytes: n(r.disk_bytes),
          disk_raw: n(r.disk_raw),
          unmeasured: n(r.unmeasured),
        }) as IndexTotals['tasks'][number],
    ),
    counters: counters.rows.map(
      (r) => ({ user: r.user, model: r.model, ...Object.fromEntries(COUNTER_COLUMNS.map((c) => [c, n(r[c])])) }) as IndexTotals['counters'][number],
    ),
    durations: durations.rows.map((r) => ({ bucket: n(r.bucket), n: n(r.n), total_ms: n(r.total_ms) })),
    tools: tools.rows.map((r) => ({ tool: r.tool, outcome: r.outcome, n: n(r.n) })),
    live: live.rows,
  }
}
