import { isAbsolute } from 'node:path'
import * as z from 'zod/mini'
import { isUuid } from '../../storage/fs/layout.js'
import { isPrintableName, NAME_RULE } from '../../text.js'
import { validRef } from '../../workspace/ref.js'

/**
 * What a job may ask of a worker, checked where it is written (enqueue, poll) and again
 * where it is read (the worker): a job row is untrusted input (docs/contract.md §14.4), whoever
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
 * One field of a job's spec: how it is checked, and what it adds to the child's `run`
 * (null: nothing, the worker gives it another way). A field added here is in the type,
 * the allowed keys, the checks of every writer and reader, and the child's arguments.
 */
interface Field<S extends z.ZodMiniType> {
  schema: S
  run: ((value: z.output<S>) => string[]) | null
}
const field = <S extends z.ZodMiniType>(schema: S, run: Field<S>['run']): Field<S> => ({ schema, run })

const TEXT = 'is not text'
const text = () => z.string({ error: TEXT })
const name = () => text().check(z.refine((v) => v.trim() === v && isPrintableName(v), { error: `is not ${NAME_RULE}` }))
const positive = () => z.int({ error: 'is not a positive whole number' }).check(z.positive({ error: 'is not a positive whole number' }))
const USD = 'is not an amount in USD above 0'
const usd = () => z.number({ error: USD }).check(z.refine((v) => Number.isFinite(v) && v > 0, { error: USD }))
const quoted = (input: unknown) => JSON.stringify(String(input).slice(0, 40))

const FIELDS = {
  // The task's text goes to the child's standard input.
  task: field(text(), () => ['--task-file', '-']),
  github: field(text().check(z.regex(/^[\w.-]+\/[\w.-]+#\d{1,9}$/, { error: 'is not owner/repo#N' })), (v) => ['--github', v]),
  gitlab: field(text().check(z.regex(/^[\w.-]+(?:\/[\w.-]+)+[#!]\d{1,9}$/, { error: 'is not group/project#N or !N' })), (v) => ['--gitlab', v]),
  user: field(name(), (v) => ['--user', v]),
  // The workspace the child gets is the worker's to give (this one, or a clone of `repo`).
  workspace: field(text().check(z.refine((v) => isAbsolute(v) && !v.includes('\0'), { error: 'is not an absolute path' })), null),
  /** A repository to clone for the task (into fleet.workspaces_dir/<uuid>), and the branch, tag or commit to check out. */
  repo: field(
    text().check(
      z.superRefine((v, ctx) => {
        const problem = repoProblem(v)
        if (problem !== null) ctx.issues.push({ code: 'custom', message: `: ${problem}`, input: v })
      }),
    ),
    null,
  ),
  ref: field(text().check(z.refine(validRef, { error: (issue) => `${quoted(issue.input)} is not a branch, tag or commit name of a repo` })), null),
  task_id: field(name(), (v) => ['--task-id', v]),
  max_turns: field(positive(), (v) => ['--max-turns', String(v)]),
  max_tokens: field(positive(), (v) => ['--max-tokens', String(v)]),
  /** The task's cost cap (docs/running.md#budgets); with a resume, the raised cap it goes on under. */
  max_cost_usd: field(usd(), (v) => ['--max-cost', String(v)]),
  timeout: field(text().check(z.regex(/^\d{1,9}s$/, { error: 'is not a number of seconds (Ns)' })), (v) => ['--timeout', v]),
  model: field(name(), (v) => ['--model', v]),
  allow_shell: field(z.boolean({ error: 'is not true or false' }), (v) => (v ? ['--allow-shell'] : [])),
  /** Delivery of the change when the task completes (docs/delivery.md); absent: the worker's deliver.mode. */
  deliver: field(z.enum(['none', 'branch', 'pr'], { error: 'is not none, branch or pr' }), (v) => ['--deliver', v]),
  /**
   * An eval's trial (docs/eval.md#in-the-fleet): its eval's id and the trial. The worker runs `eval trial`, which reads
   * what the agent runs with (the suite, the variant's config and flags) from the eval's eval.json in the tree, never from the row.
   */
  eval: field(
    z.strictObject({
      id: text().check(z.regex(/^[0-9a-f]{12}$/, { error: 'is not an eval id' })),
      task: text().check(z.regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/, { error: 'is not a task name of a suite' })),
      variant: text().check(z.regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$/, { error: 'is not a variant name' })),
      run: positive(),
    }),
    null,
  ),
}

type Fields = typeof FIELDS
type Shape = { [K in keyof Fields]: z.ZodMiniOptional<Fields[K]['schema']> }

/** The keys a job's spec may hold, in the order the child's arguments follow. */
export const JOB_SPEC_KEYS = Object.keys(FIELDS) as (keyof Fields)[]

/** A job's spec: the flags of `run` a job asks for. Unknown keys are refused; cross-field rules follow. */
export const JobSpecSchema = z.strictObject(Object.fromEntries(JOB_SPEC_KEYS.map((k) => [k, z.optional(FIELDS[k].schema)])) as Shape).check(
  z.superRefine((s, ctx) => {
    const issue = (message: string) => ctx.issues.push({ code: 'custom', message, input: s })
    if (s.repo !== undefined && s.workspace !== undefined) issue('spec has both repo and workspace')
    if (s.ref !== undefined && s.repo === undefined) issue(`spec.ref ${quoted(s.ref)} is not a branch, tag or commit name of a repo`)
    // An eval's trial runs with its eval's variant alone: no other key may change what its agent does.
    if (s.eval !== undefined && Object.keys(s).some((k) => k !== 'eval' && k !== 'user')) issue('spec.eval goes with no other key than user')
  }),
)

/** What a job asks a worker to run. */
export type JobSpec = z.output<typeof JobSpecSchema>

/** Why `spec` is not a job spec (one line naming the key), or null. */
export function specProblem(spec: unknown): string | null {
  if (typeof spec !== 'object' || spec === null || Array.isArray(spec)) return 'spec is not an object'
  const parsed = JobSpecSchema.safeParse(spec)
  if (parsed.success) return null
  const first = parsed.error.issues[0]
  if (first === undefined) return 'spec is not valid'
  const where = first.path.length === 0 ? 'spec' : `spec.${first.path.map(String).join('.')}`
  if (first.code === 'unrecognized_keys') return `${where} has an unknown key ${JSON.stringify(String(first.keys[0] ?? '').slice(0, 40))}`
  if (first.path.length === 0) return first.message
  return first.message.startsWith(':') ? `${where}${first.message}` : `${where} ${first.message}`
}

/** What a job row holds that the worker checks before it runs anything. */
export interface JobRowFields {
  task_uuid: string
  kind: string
  priority: number
  attempts: number
  spec: unknown
}

/** Why a job read from the database cannot be run, or null when it can. */
export function jobProblem(job: JobRowFields): string | null {
  if (!isUuid(job.task_uuid)) return `task_uuid ${JSON.stringify(job.task_uuid.slice(0, 60))} is not a UUID`
  if (job.kind !== 'new' && job.kind !== 'resume') return `kind ${JSON.stringify(String(job.kind).slice(0, 20))} is neither new nor resume`
  if (!Number.isSafeInteger(job.priority) || !Number.isSafeInteger(job.attempts) || job.attempts < 0) return 'priority and attempts must be whole numbers'
  const problem = specProblem(job.spec)
  if (problem !== null) return problem
  const spec = job.spec as JobSpec
  // A task from a forge may carry a statement of its own: a review loop's follow-up (docs/delivery.md#the-review-loop).
  const forges = (['github', 'gitlab'] as const).filter((k) => spec[k] !== undefined).length
  if (job.kind === 'new' && spec.eval === undefined && (forges > 1 || (forges === 0 && spec.task === undefined)))
    return 'spec names not exactly one of task, github, gitlab, eval'
  return null
}

/**
 * The child's arguments for an eval's trial, new or resumed alike: `eval trial`, which makes the
 * workspace, runs (or resumes) the agent as task `uuid` and judges it once it has finished (docs/eval.md#in-the-fleet).
 */
export function evalTrialArgs(uuid: string, spec: JobSpec): string[] {
  const trial = spec.eval
  if (trial === undefined) return []
  const user = spec.user === undefined ? [] : ['--user', spec.user]
  return ['eval', 'trial', trial.id, '--task', trial.task, '--variant', trial.variant, '--run', String(trial.run), '--uuid', uuid, ...user]
}

/** The child's arguments for a resume: `run --resume`, and a raised cost cap when the job carries one. */
export function resumeArgs(uuid: string, spec: JobSpec): string[] {
  return ['run', '--resume', uuid, ...(spec.max_cost_usd === undefined ? [] : ['--max-cost', String(spec.max_cost_usd)])]
}

/** The child's arguments for a new job's task: `run` with the spec's flags, in `workspace` (the spec's, or the clone made for it). */
export function runArgs(uuid: string, spec: JobSpec, workspace: string | undefined): string[] {
  const args = ['run', '--uuid', uuid]
  for (const key of JOB_SPEC_KEYS) {
    const value = spec[key]
    const run = FIELDS[key].run as ((v: unknown) => string[]) | null
    if (key === 'workspace' && workspace !== undefined) args.push('--workspace', workspace)
    // A follow-up on a pull request: the issue's flag, and its statement on standard input (docs/delivery.md#the-review-loop).
    else if (key === 'task' && value !== undefined && (spec.github !== undefined || spec.gitlab !== undefined)) args.push('--follow-up-file', '-')
    else if (value !== undefined && run !== null) args.push(...run(value))
  }
  return args
}
