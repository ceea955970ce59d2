import { join } from 'node:path'
import { isErrno, NotFoundError } from '../../errors.js'
import { parseJsonObject, readSmallFile, writeJsonAtomic } from '../fs/files.js'
import { FILES } from '../fs/layout.js'

export interface TaskKey {
  task_source: string
  /** null for local tasks (docs/contract.md §12.1). */
  owner: string | null
  repo: string
  task_type: string
  task_id: string
}

export interface TaskMetadata {
  uuid: string
  task_key: TaskKey
  /** `<source>_<type>`, e.g. github_issue, gitlab_merge_request, local_task. */
  task_type: string
  task_identifier: string
  /** `owner/repo` */
  repository: string
  user: string | null
  created_at: string
  process_id: number
  hostname: string
  config: {
    llm_provider: string
    model: string
    context_length: number
    compression_threshold: number
  }
  /** How `run` started the task, so that a resume continues with the same settings. */
  run?: RunRecord
  /** The earlier task whose final summary this one started from (docs/contract.md §5). */
  inherited_from?: string | null
}

export interface RunRecord {
  workspace: string
  allow_shell: boolean
  max_turns: number
  max_tokens: number | null
  timeout_ms: number | null
  /** The system prompt the task started with, so that a resume sends the same one. */
  system_prompt_file: string | null
  /** The recording a replay task plays back (llm.replay.from). */
  replay_from: string | null
  /** A keep-alive chat session (run --chat). */
  chat?: boolean
  /** Delivery of the change (docs/delivery.md): the mode and what the task started from, so that a resume delivers against the same base. */
  deliver?: 'none' | 'branch' | 'pr'
  /** The commit the workspace had checked out when the task started. */
  base_commit?: string | null
  /** Its branch (null: a detached HEAD). */
  base_branch?: string | null
  /** The workspace's `origin` URL then (mode pr pushes there, whatever the workspace's config says later). */
  base_remote?: string | null
  /** The repository the workspace's `.git` named then, resolved (docs/delivery.md#the-repository): delivery works on it only. */
  base_git?: RepositoryRecord
  /** Where the change goes: a new branch (the default), or one more commit on an existing PR's head branch. */
  deliver_target?: DeliveryTarget
  /** The pull/merge request whose head branch the workspace has checked out (docs/delivery.md#the-review-loop); null: none could be. */
  pr_head?: PrHead | null
  /** The task's cost cap in USD (run --max-cost, run.max_cost_usd), across resumes; absent or null: none. */
  max_cost_usd?: number | null
  /** What a delivering task works on (docs/delivery.md#what-a-task-starts-from); absent: the workspace itself. */
  starts_from?: StartsFrom
  /** The repository an eval's trial's workspace was made from, matched against `environments` (docs/eval.md#a-trial); absent: none. */
  environment_of?: string
}

/**
 * The tree of its own a delivering task works on (docs/delivery.md#what-a-task-starts-from):
 * a worktree made for it at the commit its checkout had (`worktree`), the fleet's `--repo`
 * clone made for it (`clone`), or a pull request's head branch checked out for it (`pr-head`).
 */
export interface StartsFrom {
  kind: 'worktree' | 'clone' | 'pr-head'
  /** The directory the task was started with (--workspace, or the current directory). */
  workspace: string
  commit: string
  /** kind worktree: the worktree (its top level) and the git directory that keeps its record. */
  worktree?: string
  git_dir?: string
}

/** A directory as the kernel knows it: a replaced one at the same path has another device/inode. */
export interface DirIdentity {
  path: string
  uid: number
  gid: number
  dev: string
  ino: string
}

/**
 * The repository a task started with (docs/delivery.md#the-repository), read before the
 * agent runs: delivery reads and writes through this record only, never through whatever
 * the workspace's `.git` names when it ends.
 */
export interface RepositoryRecord {
  /** The work tree's top, resolved: the directory that holds `.git`. */
  top: string
  /** What `<top>/.git` was: the git directory itself, a gitfile naming it (a worktree's), or a link to it. */
  dotgit: 'directory' | 'gitfile' | 'symlink'
  /** The git directory (HEAD, the index) and the common one (objects, refs, config); the same outside a worktree. */
  git_dir: DirIdentity
  common_dir: DirIdentity
  /** `objects/info/alternates` of the common directory (null: none). */
  alternates: string | null
  /** `include.path` and `includeIf.<condition>.path` of the repository's own config files (each `key=value`). */
  includes: string[]
}

/** A pull request (GitHub) or merge request (GitLab) by its head branch. */
export interface PrHead {
  branch: string
  number: number
  url: string
}

/** Where delivery puts the change (docs/delivery.md). */
export type DeliveryTarget = { kind: 'new-branch' } | { kind: 'pr-head'; branch: string; pr: { number: number; url: string } }

export function writeMetadata(dir: string, metadata: TaskMetadata): void {
  writeJsonAtomic(join(dir, FILES.metadata), metadata)
}

/**
 * Reads metadata.json in either seed's form: docs/contract.md §9 nests the identity in
 * `task_key`, docs/contract.md §7 spells it flat (`task_type`, `task_identifier`, `repository`).
 * The result always has both.
 */
export function readMetadata(dir: string): TaskMetadata {
  const path = join(dir, FILES.metadata)
  let text: string
  try {
    text = readSmallFile(path)
  } catch (err) {
    if (isErrno(err, 'ENOENT')) throw new NotFoundError(`${path} is missing`, 'the task directory is incomplete; see ctxagent reindex')
    throw err
  }
  return parseMetadata(text, path)
}

export function parseMetadata(text: string, path: string): TaskMetadata {
  return normalizeMetadata(parseJsonObject(text, path, 'restore it from a backup or remove the task'))
}

export function normalizeMetadata(raw: Record<string, unknown>): TaskMetadata {
  const s = (v: unknown, fallback = ''): string => (typeof v === 'string' ? v : typeof v === 'number' ? String(v) : fallback)
  const key = (raw.task_key ?? {}) as Record<string, unknown>
  const repository = s(raw.repository, key.owner && key.repo ? `${s(key.owner)}/${s(key.repo)}` : '')
  const [owner = '', repo = ''] = repository.split('/')
  const taskType = s(raw.task_type, key.task_source && key.task_type ? `${s(key.task_source)}_${s(key.task_type)}` : 'unknown')
  const config = (raw.config ?? {}) as Record<string, unknown>
  return {
    uuid: s(raw.uuid),
    task_key: {
      task_source: s(key.task_source, taskType.split('_')[0]),
      owner: key.owner === null ? null : s(key.owner, owner),
      repo: s(key.repo, repo),
      task_type: s(key.task_type, taskType.split('_').slice(1).join('_')),
      task_id: s(key.task_id, s(raw.task_identifier)),
    },
    task_type: taskType,
    task_identifier: s(raw.task_identifier, s(key.task_id)),
    repository,
    user: typeof raw.user === 'string' ? raw.user : null,
    created_at: s(raw.created_at),
    process_id: typeof raw.process_id === 'number' ? raw.process_id : 0,
    hostname: s(raw.hostname),
    config: {
      llm_provider: s(config.llm_provider),
      model: s(config.model),
      context_length: typeof config.context_length === 'number' ? config.context_length : 0,
      compression_threshold: typeof config.compression_threshold === 'number' ? config.compression_threshold : 0,
    },
    ...(raw.run !== null && typeof raw.run === 'object' ? { run: raw.run as RunRecord } : {}),
    ...(typeof raw.inherited_from === 'string' ? { inherited_from: raw.inherited_from } : {}),
  }
}
