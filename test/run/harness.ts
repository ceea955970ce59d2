import { spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { expect, onTestFinished } from 'vitest'
import { makeTree } from '../fixtures/tree.js'
import type { Tree } from '../fixtures/tree.js'
import { startFakeLlm } from '../helpers/fake-llm.js'
import type { FakeLlm, RecordedRequest } from '../helpers/fake-llm.js'
import { cliAuto } from '../helpers/in-process.js'
import { BIN, ROOT, TEST_ENV } from '../helpers/run.js'
import { giveToSandbox } from '../helpers/sandbox-owner.js'
import type { CliResult } from '../helpers/run.js'

export interface RunSetup {
  tree: Tree
  /** The workspace the agent works in. */
  ws: string
  fake: FakeLlm
  config: string
  /** Runs `ctxagent <args> --home <tree> --config <config>` to its end. */
  run(args: string[], env?: Record<string, string>): Promise<CliResult>
  /** Starts it as a child (for signals), `env` added to its environment; stdout and stderr are collected. */
  start(args: string[], env?: Record<string, string>): Started
}

export interface Started {
  child: ChildProcess
  out: () => string
  err: () => string
}

/** A task tree, a workspace with a small project, a fake LLM and a config pointing at it. */
export async function runSetup(extraYaml = ''): Promise<RunSetup> {
  const tree = makeTree()
  const ws = mkdtempSync(join(tmpdir(), 'ctxagent-ws-'))
  onTestFinished(() => rmSync(ws, { recursive: true, force: true }))
  writeFileSync(join(ws, 'calc.js'), 'export function add(a, b) {\n  return a - b\n}\n')
  writeFileSync(join(ws, 'README.md'), '# calc\n\nadd(a, b) adds two numbers.\n')
  // As root, commands and MCP servers run as the workspace's owner: nobody, here.
  giveToSandbox(ws)
  const fake = await startFakeLlm()
  const config = join(tree.base, 'config.yaml')
  writeFileSync(config, fake.configYaml(extraYaml))
  const common = ['--home', tree.base, '--config', config]
  return {
    tree,
    ws,
    fake,
    config,
    run: (args, env = {}) => cliAuto([...args, ...common], env),
    start: (args, env = {}) => {
      const child = spawn(process.execPath, [BIN, ...args, ...common], {
        cwd: ROOT,
        env: { ...process.env, ...TEST_ENV, ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      })
      let out = ''
      let err = ''
      child.stdout?.on('data', (d: Buffer) => (out += d.toString()))
      child.stderr?.on('data', (d: Buffer) => (err += d.toString()))
      onTestFinished(() => {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL')
      })
      return { child, out: () => out, err: () => err }
    },
  }
}

export type Line = Record<string, unknown>

export function jsonl(path: string): Line[] {
  if (!existsSync(path)) return []
  return readFileSync(path, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Line)
}

/** The one task of a tree (wherever it is), with its files parsed. */
export function onlyTask(tree: Tree) {
  const found = (['running', 'paused', 'completed'] as const).flatMap((location) => tree.layout.list(location).map((uuid) => ({ location, uuid })))
  expect(found).toHaveLength(1)
  return readTask(tree, (found[0] as { uuid: string }).uuid)
}

export function readTask(tree: Tree, uuid: string) {
  const location = (['running', 'paused', 'completed'] as const).find((l) => existsSync(tree.layout.taskDir(l, uuid)))
  if (location === undefined) throw new Error(`task ${uuid} is nowhere`)
  const dir = tree.layout.taskDir(location, uuid)
  const json = (name: string) => JSON.parse(readFileSync(join(dir, name), 'utf8')) as Line
  return {
    uuid,
    location,
    dir,
    files: readdirSync(dir).sort(),
    metadata: json('metadata.json'),
    state: json('state.json'),
    messages: jsonl(join(dir, 'messages.jsonl')),
    current: jsonl(join(dir, 'current.jsonl')),
    tools: jsonl(join(dir, 'tools.jsonl')),
    summaries: jsonl(join(dir, 'summaries.jsonl')),
    inbox: jsonl(join(dir, 'inbox.jsonl')),
  }
}

/**
 * A request the LLM can accept: every assistant tool call is answered by a tool
 * message right after it (before any other role), and every tool message answers a
 * call of the assistant message before it.
 */
export function expectWellFormed(request: RecordedRequest): void {
  const messages = request.body.messages as unknown as { role: string; tool_calls?: { id: string }[]; tool_call_id?: string }[]
  let open = new Set<string>()
  for (const m of messages) {
    if (m.role === 'tool') {
      expect(open.has(m.tool_call_id as string), `tool result ${m.tool_call_id} answers an open call`).toBe(true)
      open.delete(m.tool_call_id as string)
      continue
    }
    expect([...open], 'calls left without results').toEqual([])
    open = new Set((m.tool_calls ?? []).map((c) => c.id))
  }
  expect([...open], 'calls left without results at the end').toEqual([])
}

/** The agent's own requests (the ones with tools), not the summarizer's. */
export function agentRequests(fake: FakeLlm): RecordedRequest[] {
  return fake.requests.filter((r) => Array.isArray(r.body.tools))
}

/** seq strictly increasing from 1 with no gap. */
export function expectContinuousSeq(messages: Line[]): void {
  expect(messages.map((m) => m.seq)).toEqual(messages.map((_, i) => i + 1))
}

/**
 * Polls `probe` until it returns something truthy. A probe that throws (a file read
 * while another process writes it) counts as "not yet".
 */
export async function waitFor<T>(what: string, probe: () => T | null | undefined | false, ms = 50_000): Promise<T> {
  const deadline = Date.now() + ms
  for (;;) {
    let value: T | null | undefined | false = null
    try {
      value = probe()
    } catch {
      value = null
    }
    if (value) return value
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}
