import { ENV_COUNTERS, ENV_TASK_COLUMNS } from '../../../src/storage/index/env-totals.js'
import {
  DELIVERY_COUNTERS,
  FIRST_COUNTERS,
  LATER_COUNTERS,
  LATER_TASK_COLUMNS,
  SUMMARY_COUNTERS,
  SUMMARY_TASK_COLUMNS,
} from '../../../src/storage/index/counter-eras.js'
import { sqliteTriggers } from '../../../src/storage/index/totals.js'

/**
 * tasks.db's later counters' migration, the deliveries', the pull requests', the environments' and the summaries' tokens'
 * after it undone (the last five): their tables, indexes and columns dropped, the totals' triggers as the migration before left them. A test
 * then sets user_version back by SQLITE_UNDONE.
 */
export const SQLITE_UNDO_LATER_COUNTERS = `
  DROP TRIGGER tasks_totals_insert; DROP TRIGGER tasks_totals_update; DROP TRIGGER tasks_totals_delete;
  ${SUMMARY_TASK_COLUMNS.map((c) => `ALTER TABLE tasks DROP COLUMN ${c};`).join(' ')}
  ${SUMMARY_COUNTERS.map((c) => `ALTER TABLE task_counters DROP COLUMN ${c};`).join(' ')}
  DROP TABLE pull_requests; DROP INDEX idx_tasks_pr_url;
  ALTER TABLE tasks DROP COLUMN pr_url; ALTER TABLE tasks DROP COLUMN pr_opened; ALTER TABLE tasks DROP COLUMN delivery_commit;
  ${ENV_TASK_COLUMNS.map((c) => `ALTER TABLE tasks DROP COLUMN ${c};`).join(' ')}
  ${ENV_COUNTERS.map((c) => `ALTER TABLE task_counters DROP COLUMN ${c};`).join(' ')}
  ALTER TABLE tasks DROP COLUMN delivery_result;
  ${DELIVERY_COUNTERS.map((c) => `ALTER TABLE task_counters DROP COLUMN ${c};`).join(' ')}
  ${LATER_TASK_COLUMNS.map((c) => `ALTER TABLE tasks DROP COLUMN ${c};`).join(' ')}
  ${LATER_COUNTERS.map((c) => `ALTER TABLE task_counters DROP COLUMN ${c};`).join(' ')}
  ${sqliteTriggers(FIRST_COUNTERS)}`

/** How many of tasks.db's migrations SQLITE_UNDO_LATER_COUNTERS undoes. */
export const SQLITE_UNDONE = 5
