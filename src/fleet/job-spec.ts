import { isAbsolute } from 'node:path'
import { isUuid } from '../storage/fs/layout.js'
import type { Job } from './jobs.js'

/**
 * What a job may ask of a worker, checked where it is written (enqueue, poll) and again
 * where it is read (the worker): a job row is untrusted input (SPEC §14.4), whoever
 * wrote it — a row written by hand must not clone outside fleet.workspaces_dir, give git
 * an option or `run` a flag.
 */

/** A git URL: scheme://…, scp-like user@host:path, or an absolute path (a repository on the shared mount). */
const REPO_URL = /^(?:(?:https?|ssh|git|file):\/\/[^\s#]+|[\w.-]+@[\w.-]+:[^\s#]+|\/[^\s#]*)$/

/** Why `url` cannot be a job's repository (never quoting a user or password it holds), or null. */
export function repoProblem(url: string): string | null {
  if (url.length > 2000 || !REPO_URL.test(url)) return `'${withoutUserinfo(url).slice(0, 80)}' is not a git URL`
  if (userinfoProblem(url)) return `the URL of ${withoutUserinfo(url).slice(0, 80)} holds a user name or password`
  return null
}

/**
 * A user or password in a URL ends up in the clone's .git/config, where the task's model
 * reads it. Refused: http(s), git and file URLs carry none, ssh URLs a user name at most
 * (the key authenticates; scp-like user@host:path is that too).
 */
function userinfoProblem(url: string): boolean {
  const scheme = /^([a-z]+):\/\/([^/]*)/i.exec(url)
  if (scheme === null) return false
  const authority = scheme[2] as string
  const at = authority.lastIndexOf('@')
  if (at < 0) return false
  return (scheme[1] as string).toLowerCase() !== 'ssh' || authority.slice(0, at).includes(':')
}

/** The URL with whatever stands before its host's @ cut out (scp-like user:password@host too), for messages. */
export function withoutUserinfo(url: string): string {
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/)?[^/]*@/i, (_all, scheme: string | undefined) => `${scheme ?? ''}…@`)
}

/**
 * Whether a `--repo` ref may be given to git: a branch, tag or commit name, never
 * something git would read as an option (`-f`, `--merge`) or a revision range.
 */
export function validRef(ref: string): boolean {
  return /^[\w./-]{1,200}$/.test(ref) && !ref.startsWith('-') && !ref.includes('..') && !ref.endsWith('.lock') && !ref.endsWith('/') && !ref.endsWith('.')
}

/** A --user or --task-id: 1 to 200 printable characters. */
export function validName(value: string): boolean {
  return value.trim() === value && value !== '' && value.length <= 200 && !/[\u0000-\u001f\u007f]/.test(value)
}

const KEYS = new Set(['task', 'github', 'gitlab', 'user', 'workspace', 'repo', 'ref', 'task_id', 'max_turns', 'max_tokens', 'timeout', 'model', 'allow_shell', 'deliver'])

/** Why a job read from the database cannot be run, or null when it can. */
export function jobProblem(job: Job): string | null {
  if (!isUuid(job.task_uuid)) return `task_uuid ${JSON.stringify(job.task_uuid.slice(0, 60))} is not a UUID`
  if (job.kind !== 'new' && job.kind !== 'resume') return `kind ${JSON.stringify(String(job.kind).slice(0, 20))} is neither new nor resume`
  if (!Number.isSafeInteger(job.priority) || !Number.isSafeInteger(job.attempts) || job.attempts < 0) return 'priority and attempts must be whole numbers'
  const spec = job.spec as unknown
  if (typeof spec !== 'object' || spec === null || Array.isArray(spec)) return 'spec is not an object'
  const s = spec as Record<string, unknown>
  const unknownKey = Object.keys(s).find((k) => !KEYS.has(k))
  if (unknownKey !== undefined) return `spec has an unknown key ${JSON.stringify(unknownKey.slice(0, 40))}`
  if (s.allow_shell !== undefined && typeof s.allow_shell !== 'boolean') return 'spec.allow_shell is not true or false'
  for (const key of KEYS) if (key !== 'allow_shell' && s[key] !== undefined && (key === 'max_turns' || key === 'max_tokens' ? !(Number.isSafeInteger(s[key]) && (s[key] as number) > 0) : typeof s[key] !== 'string')) return `spec.${key} is not ${key.startsWith('max_') ? 'a positive whole number' : 'text'}`
  const text = s as Record<string, string | undefined> & { model?: string }
  // A task from a forge may carry a statement of its own: a review loop's follow-up (docs/delivery.md#the-review-loop).
  if (job.kind === 'new' && ((text.github !== undefined && text.gitlab !== undefined) || [text.task, text.github, text.gitlab].every((v) => v === undefined))) return 'spec names not exactly one of task, github, gitlab'
  if (text.github !== undefined && !/^[\w.-]+\/[\w.-]+#\d{1,9}$/.test(text.github)) return 'spec.github is not owner/repo#N'
  if (text.gitlab !== undefined && !/^[\w.-]+(?:\/[\w.-]+)+[#!]\d{1,9}$/.test(text.gitlab)) return 'spec.gitlab is not group/project#N or !N'
  for (const key of ['user', 'task_id', 'model'] as const) if (text[key] !== undefined && !validName(text[key])) return `spec.${key} is not 1 to 200 printable characters`
  if (text.deliver !== undefined && !['none', 'branch', 'pr'].includes(text.deliver)) return 'spec.deliver is not none, branch or pr'
  if (text.timeout !== undefined && !/^\d{1,9}s$/.test(text.timeout)) return 'spec.timeout is not a number of seconds (Ns)'
  if (text.workspace !== undefined && (!isAbsolute(text.workspace) || text.workspace.includes('\0'))) return 'spec.workspace is not an absolute path'
  if (text.repo !== undefined && text.workspace !== undefined) return 'spec has both repo and workspace'
  if (text.repo !== undefined) {
    const problem = repoProblem(text.repo)
    if (problem !== null) return `spec.repo: ${problem}`
  }
  if (text.ref !== undefined && (text.repo === undefined || !validRef(text.ref))) return `spec.ref ${JSON.stringify(text.ref.slice(0, 40))} is not a branch, tag or commit name of a repo`
  return null
}
