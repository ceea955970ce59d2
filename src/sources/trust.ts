/**
 * Who may start work (docs/delivery.md#trust): a label or comment is a trigger only when
 * its author has write access to the repository. Everyone else's words still reach the
 * model, quoted, as data.
 */

/** GitHub's `author_association` values that mean write access without asking further. */
export const WRITE_ASSOCIATIONS: ReadonlySet<string> = new Set(['OWNER', 'MEMBER', 'COLLABORATOR'])

/** GitLab's Developer access level: the lowest that can push. */
export const GITLAB_DEVELOPER = 30

/** How long an answer about one person is kept: a pass asks once per person, and a change of rights takes effect within minutes. */
const KEEP_MS = 300_000

/**
 * Write access by person, asked of the forge once per KEEP_MS. A failed question is not
 * an answer: it is asked again next time (and the item is left for the next pass).
 */
export class AccessCache {
  private readonly known = new Map<string, { ok: boolean; at: number }>()

  constructor(private readonly ask: (who: string) => Promise<boolean>) {}

  async canWrite(who: string): Promise<boolean> {
    const hit = this.known.get(who)
    if (hit !== undefined && Date.now() - hit.at < KEEP_MS) return hit.ok
    const ok = await this.ask(who)
    this.known.set(who, { ok, at: Date.now() })
    return ok
  }
}

/** A permission answer from GitHub's collaborator permission API: write, maintain or admin. */
export function githubCanWrite(answer: { permission?: string; role_name?: string }): boolean {
  return ['admin', 'maintain', 'write'].includes(answer.role_name ?? '') || ['admin', 'write'].includes(answer.permission ?? '')
}
