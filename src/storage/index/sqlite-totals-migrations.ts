import { ENV_COUNTERS, ENV_TASK_COLUMNS } from './env-totals.js'
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
import { applyRow, liveSums, SQLITE, sqliteTriggers } from './totals.js'

// tasks.db's migrations of the totals (totals.ts), one per era; an applied migration's text is never rewritten.

const SQLITE_TABLES = `
  CREATE TABLE IF NOT EXISTS task_totals (location TEXT NOT NULL, status TEXT NOT NULL, user TEXT NOT NULL, model TEXT NOT NULL,
    tasks INTEGER NOT NULL, disk_bytes INTEGER NOT NULL, disk_raw INTEGER NOT NULL, unmeasured INTEGER NOT NULL, PRIMARY KEY (location, status, user, model));
  CREATE TABLE IF NOT EXISTS task_counters (user TEXT NOT NULL, model TEXT NOT NULL, ${FIRST_COUNTERS.map((c) => `${c} INTEGER NOT NULL`).join(', ')}, PRIMARY KEY (user, model));
  CREATE TABLE IF NOT EXISTS task_durations (bucket INTEGER PRIMARY KEY, n INTEGER NOT NULL, total_ms INTEGER NOT NULL);`

/** The migration that adds the totals to tasks.db: tables, triggers, and the rows already there. */
export function sqliteTotalsMigration(): string {
  const live = liveSums(SQLITE, FIRST_COUNTERS)
  return `${SQLITE_TABLES}
  ${sqliteTriggers(FIRST_COUNTERS)}
  INSERT INTO task_totals ${live.tasks};
  INSERT INTO task_counters ${live.counters};
  INSERT INTO task_durations ${live.durations};`
}

/**
 * The migration that adds tool calls by tool and outcome to tasks.db: the column, the
 * table, its triggers (a deleted row's calls stay: no delete trigger). Every row there
 * has no tally yet (its calls are unknown), so the table starts as the tool call
 * counter's whole, retired part and all: one unknown figure.
 */
export function sqliteToolCallsMigration(): string {
  const d = SQLITE
  const body = (statements: string[]) => statements.map((x) => `${x};`).join('\n')
  return `
  ALTER TABLE tasks ADD COLUMN tool_calls TEXT;
  CREATE TABLE task_tool_calls (tool TEXT NOT NULL, outcome TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (tool, outcome));
  INSERT INTO task_tool_calls (tool, outcome, n) SELECT 'unknown', 'unknown', SUM(tool_calls) FROM task_counters HAVING SUM(tool_calls) > 0;
  CREATE TRIGGER tasks_tool_calls_insert AFTER INSERT ON tasks BEGIN
    ${body(applyRow(d, 'NEW.', 1, ['tools']))}
  END;
  CREATE TRIGGER tasks_tool_calls_update AFTER UPDATE ON tasks
    WHEN OLD.tool_calls IS NOT NEW.tool_calls OR OLD.total_tool_calls IS NOT NEW.total_tool_calls BEGIN
    ${body([...applyRow(d, 'OLD.', -1, ['tools']), ...applyRow(d, 'NEW.', 1, ['tools'])])}
  END;`
}

/** The migration that adds them to tasks.db: the columns, and the totals' triggers made again to count them. */
export function sqliteCountersMigration(): string {
  return `
  ${LATER_TASK_COLUMNS.map((c) => `ALTER TABLE tasks ADD COLUMN ${c} INTEGER;`).join('\n  ')}
  ${LATER_COUNTERS.map((c) => `ALTER TABLE task_counters ADD COLUMN ${c} INTEGER NOT NULL DEFAULT 0;`).join('\n  ')}
  DROP TRIGGER IF EXISTS tasks_totals_insert; DROP TRIGGER IF EXISTS tasks_totals_update; DROP TRIGGER IF EXISTS tasks_totals_delete;
  ${sqliteTriggers(SECOND_COUNTERS)}`
}

/**
 * The migration that counts deliveries in tasks.db: each row's delivery_result (NULL in rows
 * written before, until a reindex fills it from state.json), the counters (starting at 0:
 * what deleted tasks delivered is not known), the totals' triggers made again to count them.
 */
export function sqliteDeliveriesMigration(): string {
  return `
  ALTER TABLE tasks ADD COLUMN delivery_result TEXT;
  ${DELIVERY_COUNTERS.map((c) => `ALTER TABLE task_counters ADD COLUMN ${c} INTEGER NOT NULL DEFAULT 0;`).join('\n  ')}
  DROP TRIGGER IF EXISTS tasks_totals_insert; DROP TRIGGER IF EXISTS tasks_totals_update; DROP TRIGGER IF EXISTS tasks_totals_delete;
  ${sqliteTriggers(DELIVERED_COUNTERS)}`
}

/**
 * The migration that counts the repositories' environments in tasks.db (env-totals.ts): each
 * row's cache result and setup time (NULL in rows written before, until a reindex fills them
 * from state.json), the counters (starting at 0), the totals' triggers made again to count them.
 */
export function sqliteEnvMigration(): string {
  return `
  ALTER TABLE tasks ADD COLUMN ${ENV_TASK_COLUMNS[0]} TEXT;
  ALTER TABLE tasks ADD COLUMN ${ENV_TASK_COLUMNS[1]} INTEGER;
  ${ENV_COUNTERS.map((c) => `ALTER TABLE task_counters ADD COLUMN ${c} INTEGER NOT NULL DEFAULT 0;`).join('\n  ')}
  DROP TRIGGER IF EXISTS tasks_totals_insert; DROP TRIGGER IF EXISTS tasks_totals_update; DROP TRIGGER IF EXISTS tasks_totals_delete;
  ${sqliteTriggers(ENVIRONED_COUNTERS)}`
}

/**
 * The migration that adds them to tasks.db: the columns (NULL in rows written before, until a reindex fills them from
 * state.json), the counters (starting at 0: what deleted tasks' summaries took is not known), the triggers made again.
 */
export function sqliteSummaryTokensMigration(): string {
  return `
  ${SUMMARY_TASK_COLUMNS.map((c) => `ALTER TABLE tasks ADD COLUMN ${c} INTEGER;`).join('\n  ')}
  ${SUMMARY_COUNTERS.map((c) => `ALTER TABLE task_counters ADD COLUMN ${c} INTEGER NOT NULL DEFAULT 0;`).join('\n  ')}
  DROP TRIGGER IF EXISTS tasks_totals_insert; DROP TRIGGER IF EXISTS tasks_totals_update; DROP TRIGGER IF EXISTS tasks_totals_delete;
  ${sqliteTriggers(COUNTER_COLUMNS)}`
}
