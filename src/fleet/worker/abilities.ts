import type { Job } from '../queue/job.js'

/** What this worker's own configuration lets it serve (docs/contract.md §14.5). */
export interface WorkerAbilities {
  /** fleet.workspaces_dir: where `--repo` jobs are cloned; null: none can be. */
  workspacesDir: string | null
  githubToken: boolean
  gitlabToken: boolean
  /** tools.shell is on for its new tasks, and why the sandbox run_command needs does not work here (null: it works, or no shell; a resume keeps its task's own setting, which run checks). */
  shellProblem: string | null
  /** Why the sandbox does not work here, whatever tools.shell says (null: it works, or tools.sandbox is none). */
  sandboxProblem: string | null
}

/**
 * Why this worker cannot serve `job`, or null. Refused, the job ends with this reason
 * instead of its task failing halfway (or a clone landing in the worker's current
 * directory): a new job fails, a resume leaves its task paused as it was.
 */
export function cannotServe(job: Job, abilities: WorkerAbilities): string | null {
  const spec = job.spec
  if (job.kind === 'new' && spec.repo !== undefined && abilities.workspacesDir === null) {
    return 'this worker has no fleet.workspaces_dir to clone the --repo job into (set it on every worker, on the shared mount)'
  }
  if (spec.github !== undefined && !abilities.githubToken)
    return 'this worker has no GitHub token for the --github job (set github.token, or GITHUB_TOKEN in its environment)'
  if (spec.gitlab !== undefined && !abilities.gitlabToken)
    return 'this worker has no GitLab token for the --gitlab job (set gitlab.token, or GITLAB_TOKEN in its environment)'
  if (job.kind === 'new' && job.spec.allow_shell === true && abilities.sandboxProblem !== null)
    return `the job asks for run_command (--allow-shell), and this worker's sandbox does not work here: ${abilities.sandboxProblem}`
  if (job.kind === 'new' && abilities.shellProblem !== null)
    return `this worker's tasks get run_command (tools.shell), and its sandbox does not work here: ${abilities.shellProblem}`
  return null
}
