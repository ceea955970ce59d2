import { mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { expect, onTestFinished } from 'vitest'
import { ToolRegistry } from '../../src/tools/registry.js'
import type { CallOutcome } from '../../src/tools/registry.js'
import { planSandbox } from '../../src/tools/sandbox.js'
import type { SandboxPlan } from '../../src/tools/sandbox.js'
import type { ReadStamp, ToolContext } from '../../src/tools/types.js'
import { giveToSandbox } from '../helpers/sandbox-owner.js'

export interface Fixture {
  /** Holds the workspace and, beside it, a directory the tools must never touch. */
  root: string
  ws: string
  outside: string
  /** A task tree inside the workspace, holding TREE SECRET: no tool may reach it. */
  tree: string
  ctx: ToolContext
  reads: Map<string, ReadStamp>
  tools: ToolRegistry
  call(name: string, args: Record<string, unknown> | string): Promise<CallOutcome>
  /** The directory outside still holds exactly secret.txt, unchanged. */
  outsideUntouched(): void
}

/** A real temp workspace (with src/app.js) and an outside directory with secret.txt, removed after the test. */
export function setup(
  options: { signal?: AbortSignal; allowShell?: boolean; commandTimeoutSeconds?: number; sandbox?: SandboxPlan; treeInside?: boolean } = {},
): Fixture {
  const root = realpathSync(mkdtempSync(join(tmpdir(), 'ctxagent-tools-')))
  onTestFinished(() => rmSync(root, { recursive: true, force: true }))
  const ws = join(root, 'ws')
  const outside = join(root, 'outside')
  mkdirSync(join(ws, 'src'), { recursive: true })
  mkdirSync(outside)
  writeFileSync(join(outside, 'secret.txt'), 'TOP SECRET\n')
  writeFileSync(join(ws, 'src', 'app.js'), 'const a = 1\nconst b = 2\nexport { a, b }\n')
  // A task tree (inside the workspace with treeInside, the default layout's danger): hidden from every tool and command.
  const tree = options.treeInside ? join(ws, 'logs', 'contexts') : join(root, 'tree')
  mkdirSync(join(tree, 'running'), { recursive: true })
  writeFileSync(join(tree, 'running', 'state.json'), '{"password":"TREE SECRET"}\n')
  const reads = new Map<string, ReadStamp>()
  giveToSandbox(ws, root)
  // Planned when a command first needs it: planning probes bwrap (a process), which the
  // file tools' tests never need, so that they run in `npm run test:unit` too.
  let sandbox = options.sandbox
  const plan = (): SandboxPlan => {
    if (sandbox !== undefined) return sandbox
    const planned = planSandbox({ sandbox: 'bwrap', network: false, sandbox_read_only: [] }, [tree], ws)
    if (!planned.ok) throw new Error(`the tool tests need bubblewrap: ${planned.why}`)
    return (sandbox = planned.plan)
  }
  const ctx: ToolContext = {
    workspace: ws,
    hidden: [tree],
    get sandbox() {
      return plan()
    },
    signal: options.signal ?? new AbortController().signal,
    commandTimeoutSeconds: options.commandTimeoutSeconds ?? 120,
    reads: { get: (p) => reads.get(p), set: (p, s) => void reads.set(p, s) },
  }
  const tools = ToolRegistry.builtin({ allowShell: options.allowShell ?? true })
  let n = 0
  const call = (name: string, args: Record<string, unknown> | string) =>
    tools.call({ id: `c${n++}`, type: 'function', function: { name, arguments: typeof args === 'string' ? args : JSON.stringify(args) } }, ctx)
  const outsideUntouched = () => {
    expect(readdirSync(outside)).toEqual(['secret.txt'])
    expect(readFileSync(join(outside, 'secret.txt'), 'utf8')).toBe('TOP SECRET\n')
  }
  return { root, ws, outside, tree, ctx, reads, tools, call, outsideUntouched }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
