import type { Pool } from 'pg'
import type { Layout } from '../../storage/fs/layout.js'
import type { ClaimBudget } from '../queue/claim-budget.js'
import type { CloneCredential } from '../../workspace/clone.js'
import type { Job } from '../queue/job.js'
import type { WorkerRecord } from './registry.js'
import type { RetryPolicy } from '../queue/retry-policy.js'

export interface WorkerOptions {
  url: string
  pool: Pool
  record: WorkerRecord
  layout: Layout
  /** The ctxagent entry to run each task with (this very program), and the global flags it needs. */
  command: string[]
  /**
   * Keep one child started ahead of its job (node up, the CLI loaded, waiting on fd 3
   * for the arguments of its `run`): a claimed job starts without node's start-up.
   * Only while fewer tasks run than the host has cores (`cores`).
   */
  warmChild: boolean
  /** The cores the warm child's start-up may take one of (default: os.availableParallelism()). */
  cores?: number
  pollMs: number
  heartbeatMs: number
  /** fleet.workspaces_dir: where `--repo` jobs are cloned. */
  workspacesDir: string | null
  /** Tokens git is given for the `--repo` clones of their hosts (github.token, gitlab.token). */
  cloneCredentials?: CloneCredential[]
  /**
   * Hands a fresh clone to the user its commands run as (as root: the sandbox's
   * unprivileged identity, which must be able to write it); nothing when not root.
   */
  giveClone?: (dir: string) => void
  /** fleet.max_attempts: how often a job whose agent is killed before its task began is tried (default 3). */
  maxAttempts?: number
  /** fleet.agent_niceness: nice(1) steps its agents run below the worker. */
  agentNiceness?: number
  /** fleet.retry: a task its LLM side paused for a while is run again later (docs/contract.md §14.4); absent: never. */
  retry?: RetryPolicy
  /** fleet.limits.per_user: at most this many running tasks of one user, fleet-wide. */
  perUser?: number | null
  /** The shared cost caps at a time (claim-budget.ts): a job whose cap is spent waits for its reset, unclaimed; absent: none. */
  budget?: ((now: Date) => ClaimBudget) | null
  /** The clock the budget windows are told by (default: the system's). */
  now?: () => Date
  log: (line: string) => void
  /**
   * A job's end at its level (docs/fleet-operations.md#a-jobs-history): a failure the fleet runs again (a retry) is a
   * warning, one that fails the job an error; a wait for a usage limit or a budget window is planned, `log`; default: `log`.
   */
  warn?: (line: string) => void
  error?: (line: string) => void
  /** Why this worker's configuration cannot serve a job (abilities.ts), or null: a refused job ends with the reason. */
  refuse?: (job: Job) => string | null
  /** Passes a child's stderr on (default: as it comes); `--log-format json` wraps what is not JSON. */
  relay?: (pid: number | undefined) => (chunk: Buffer) => void
}
