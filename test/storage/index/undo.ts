import { FIRST_COUNTERS, LATER_COUNTERS, LATER_TASK_COLUMNS, sqliteTriggers } from '../../../src/storage/index/totals.js'

/**
 * tasks.db's later counters' migration undone (the last one): their columns dropped, the
 * totals' triggers as the migration before left them. A test then sets user_version back.
 */
export const SQLITE_UNDO_LATER_COUNTERS = `
  DROP TRIGGER tasks_totals_insert; DROP TRIGGER tasks_totals_update; DROP TRIGGER tasks_totals_delete;
  ${LATER_TASK_COLUMNS.map((c) => `ALTER TABLE tasks DROP COLUMN ${c};`).join(' ')}
  ${LATER_COUNTERS.map((c) => `ALTER TABLE task_counters DROP COLUMN ${c};`).join(' ')}
  ${sqliteTriggers(FIRST_COUNTERS)}`

/** tasks.db's pull requests' migration undone (the last one, after the later counters'): the table, the index and the columns dropped. */
export const SQLITE_UNDO_PULL_REQUESTS = `
  DROP TABLE pull_requests; DROP INDEX idx_tasks_pr_url;
  ALTER TABLE tasks DROP COLUMN pr_url; ALTER TABLE tasks DROP COLUMN pr_opened; ALTER TABLE tasks DROP COLUMN delivery_commit;`
