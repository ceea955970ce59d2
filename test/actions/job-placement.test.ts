import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { placement, refuseNul } from '../../src/actions/job-placement.js'
import type { PlacementOptions } from '../../src/actions/job-placement.js'
import { UsageError } from '../../src/errors.js'

// Where and how a job's task runs (enqueue's and poll's flags), checked before any database:
// a refusal is a UsageError (exit 2) with a hint, and a spec holds only what was given.

function dirs(): { root: string; ws: string; tree: string; clones: string } {
  const root = realpathSync(mkdtempSync(join(tmpdir(), 'ctxagent-placement-')))
  onTestFinished(() => rmSync(root, { recursive: true, force: true }))
  const [ws, tree, clones] = ['ws', 'tree', 'clones'].map((name) => join(root, name)) as [string, string, string]
  for (const dir of [ws, tree, clones]) mkdirSync(dir)
  return { root, ws, tree, clones }
}

function refusal(opts: PlacementOptions, workspacesDir: string | null, tree: string): UsageError {
  try {
    placement(opts, workspacesDir, tree)
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError)
    return err as UsageError
  }
  throw new Error('no refusal')
}

describe('placement: a workspace job', () => {
  it("is the workspace's real path, with each flag given as its spec key and nothing else", () => {
    const d = dirs()
    const link = join(d.root, 'link')
    symlinkSync(d.ws, link)
    expect(placement({ workspace: link }, null, d.tree)).toEqual({ workspace: d.ws })
    expect(
      placement(
        {
          workspace: d.ws,
          user: '  ana ',
          taskId: 'nightly',
          model: 'm1',
          maxTurns: 7,
          maxTokens: 9000,
          maxCost: 1.5,
          timeout: 90_500,
          allowShell: true,
          deliver: 'pr',
        },
        null,
        d.tree,
      ),
    ).toEqual({
      workspace: d.ws,
      user: 'ana',
      task_id: 'nightly',
      model: 'm1',
      max_turns: 7,
      max_tokens: 9000,
      max_cost_usd: 1.5,
      // Whole seconds, rounded up: a job never gets less time than asked.
      timeout: '91s',
      allow_shell: true,
      deliver: 'pr',
    })
    expect(placement({ workspace: d.ws, allowShell: false }, null, d.tree)).toEqual({ workspace: d.ws })
  })

  it('refuses a workspace that is not a directory here, one holding the task tree, and one inside it', () => {
    const d = dirs()
    expect(refusal({ workspace: join(d.root, 'missing') }, null, d.tree)).toMatchObject({
      message: `the workspace ${join(d.root, 'missing')} is not a directory here`,
      hint: 'give a --workspace that exists on every host of the fleet (a shared mount)',
    })
    expect(refusal({ workspace: d.root }, null, d.tree).message).toBe(
      `the workspace ${d.root} contains the task tree ${d.tree}; the agent could read or delete its own task files`,
    )
    const inside = join(d.tree, 'sub')
    mkdirSync(inside)
    expect(refusal({ workspace: inside }, null, d.tree).message).toBe(`the workspace ${inside} is inside the task tree ${d.tree}`)
  })

  it('refuses a name that is blank, too long or holds a control character, and a NUL byte in any path or name', () => {
    const d = dirs()
    expect(refusal({ workspace: d.ws, user: '   ' }, null, d.tree).message).toBe('--user must be 1 to 200 printable characters')
    expect(refusal({ workspace: d.ws, taskId: 'x'.repeat(201) }, null, d.tree).message).toBe('--task-id must be 1 to 200 printable characters')
    expect(refusal({ workspace: d.ws, model: 'a\u001bb' }, null, d.tree).message).toBe('--model must be 1 to 200 printable characters')
    expect(refusal({ workspace: d.ws, user: 'a\0b' }, null, d.tree)).toMatchObject({
      message: "--user holds a NUL byte (\\0) at character 2, which the fleet's database cannot store",
      hint: 'remove it: a binary file is not a task',
    })
    expect(refusal({ workspace: `${d.ws}\0` }, null, d.tree).message).toMatch(/^--workspace holds a NUL byte \(\\0\) at character \d+,/)
    expect(() => refuseNul('--task', 'fine')).not.toThrow()
  })
})

describe('placement: a --repo job', () => {
  it('is the URL without its #ref, and the ref apart', () => {
    const d = dirs()
    expect(placement({ repo: 'https://github.com/o/r.git#v1.2' }, d.clones, d.tree)).toEqual({ repo: 'https://github.com/o/r.git', ref: 'v1.2' })
    expect(placement({ repo: 'git@github.com:o/r.git' }, d.clones, d.tree)).toEqual({ repo: 'git@github.com:o/r.git' })
    expect(placement({ repo: '/srv/git/r.git#main', user: 'bo' }, d.clones, d.tree)).toEqual({ repo: '/srv/git/r.git', ref: 'main', user: 'bo' })
  })

  it('refuses it beside --workspace, without fleet.workspaces_dir, with a password in its URL, a URL that is not git, a ref git would take for an option', () => {
    const d = dirs()
    expect(refusal({ repo: '/srv/r.git', workspace: d.ws }, d.clones, d.tree).message).toBe('--repo and --workspace exclude each other')
    expect(refusal({ repo: '/srv/r.git' }, null, d.tree)).toMatchObject({
      message: '--repo needs fleet.workspaces_dir',
      hint: 'set it in the config to a directory on the shared mount, outside the task tree',
    })
    const secret = refusal({ repo: 'https://ana:hunter2@github.com/o/r.git' }, d.clones, d.tree)
    expect(secret.message).toBe('--repo: the URL of https://…@github.com/o/r.git holds a user name or password')
    expect(secret.message + (secret.hint ?? '')).not.toContain('hunter2')
    expect(refusal({ repo: 'not a url' }, d.clones, d.tree).message).toBe("--repo 'not a url' is not a git URL")
    expect(refusal({ repo: '/srv/r.git#-x' }, d.clones, d.tree).message).toBe("--repo's ref '-x' is not a branch, tag or commit name")
  })

  it('refuses a clones directory that holds the task tree', () => {
    const d = dirs()
    expect(refusal({ repo: '/srv/r.git' }, d.root, d.tree).message).toBe(
      `the workspace ${d.root} contains the task tree ${d.tree}; the agent could read or delete its own task files`,
    )
  })
})
