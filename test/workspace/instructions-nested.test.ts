import { describe, expect, it } from 'vitest'
import { agentRequests, readTask, runSetup } from '../run/harness.js'
import { git, makeOrigin, write } from './repo.js'
import { giveToSandbox } from '../helpers/sandbox-owner.js'

/*
 * Nested AGENTS.md files (docs/environments.md#nested-agentsmd) through the real `ctxagent
 * run`: one at the default branch reaches the model after the agent first works in its
 * directory, exactly once, in a message after the tool results (no earlier message changes);
 * one on the task's branch, or one the agent writes in the workspace, never does.
 */

const read = (path: string) => ({ calls: [{ name: 'read_file', arguments: { path } }] })

describe('nested project instructions', () => {
  it("gives a directory's AGENTS.md from the default branch once, after the agent first reads a file there; one from the task's branch or the agent's own is not", {
    timeout: 120_000,
  }, async () => {
    const s = await runSetup()
    const origin = makeOrigin({
      'AGENTS.md': '# Root\n\nROOT-RULE\n',
      'src/AGENTS.md': '# src\n\nNESTED-SRC-RULE: every module exports one thing.\n',
      'src/a.js': 'a\n',
      'src/deep/b.js': 'b\n',
      'lib/x.js': 'x\n',
      'docs/y.md': 'y\n',
    })
    const ws = origin.clone()
    // The task's branch adds one of its own: not the default branch's, never given.
    git(ws, 'checkout', '--quiet', '-b', 'pr-head')
    write(ws, { 'docs/AGENTS.md': 'HEAD-NESTED-RULE\n' })
    git(ws, 'add', '-A')
    git(ws, 'commit', '--quiet', '-m', 'a pull request adds instructions')
    giveToSandbox(ws)
    s.fake.queue.push(
      read('lib/x.js'),
      read('src/a.js'),
      read('src/deep/b.js'),
      { calls: [{ name: 'write_file', arguments: { path: 'lib/AGENTS.md', content: 'AGENT-WRITTEN-RULE\n' } }] },
      read('lib/x.js'),
      read('docs/y.md'),
      { calls: [{ name: 'finish', arguments: { summary: 'done', status: 'done' } }] },
    )
    const r = await s.run(['run', '--task', 'look at the project', '--workspace', ws, '--json'])
    expect(r.code, r.stderr).toBe(0)
    const uuid = (JSON.parse(r.stdout) as { uuid: string }).uuid
    const sent = agentRequests(s.fake).map((q) => q.body.messages as { role: string; content: string | null }[])
    expect(sent).toHaveLength(7)
    const count = (messages: { content: string | null }[], text: string) => messages.filter((m) => (m.content ?? '').includes(text)).length
    // Not before the agent worked in src/; from the request after its first read there on, exactly once.
    expect(count(sent[1] as [], 'NESTED-SRC-RULE')).toBe(0)
    for (const messages of sent.slice(2)) expect(count(messages, 'NESTED-SRC-RULE')).toBe(1)
    const given = (sent[2] as { role: string; content: string | null }[]).at(-1)
    expect(given?.role).toBe('user')
    expect(given?.content).toContain('src/AGENTS.md')
    expect(given?.content).toContain('> NESTED-SRC-RULE')
    // Each request is the one before plus new messages: nothing earlier was rewritten.
    for (let i = 1; i < sent.length; i++) expect((sent[i] as []).slice(0, (sent[i - 1] as []).length)).toEqual(sent[i - 1])
    for (const messages of sent) {
      expect(count(messages, 'HEAD-NESTED-RULE')).toBe(0)
      // The agent's own file shows only in its own write call's arguments, never as instructions.
      expect(messages.filter((m) => m.role === 'user' && (m.content ?? '').includes('AGENT-WRITTEN-RULE'))).toEqual([])
    }
    const t = readTask(s.tree, uuid)
    expect((t.state.instructions as { files: { path: string }[] }).files.map((f) => f.path)).toEqual(['AGENTS.md', 'src/AGENTS.md'])
    expect((await s.run(['view', uuid])).stdout).toMatch(/Instructions: AGENTS\.md \(\d+ bytes\), src\/AGENTS\.md \(\d+ bytes\) from origin\/HEAD/)
  })
})
