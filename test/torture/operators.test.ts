import { spawn } from 'node:child_process'
import type { ChildProcess } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { describe, expect, it } from 'vitest'
import { makeTree, uuidN } from '../fixtures/tree.js'
import type { Tree } from '../fixtures/tree.js'
import { BIN, cliAsync, helper, ROOT } from '../helpers/run.js'
import { exitOf, lineFrom, sleep } from '../helpers/wait.js'
import { indexedPlaces, litter, strayLocks, taskPlaces, unreadable } from './checks.js'
import { record } from './report.js'

/**
 * Crash and contention for the operator commands (issue 12): task owners SIGKILLed at
 * random instants while watch-locks, cleanup, unlock, compress, stats and reindex run
 * at once, and those commands themselves SIGKILLed mid-work. After one more pass of
 * watch-locks and cleanup: no task lost or in two places, every killed owner's task
 * reaped exactly once (its record names the owner, not a reaper that died on it), no
 * litter, every file readable, and tasks.db equal to the directories.
 */
const ROUNDS = Number(process.env.CTXAGENT_TORTURE_OPS_ROUNDS ?? 2)
const OWNERS = 6
const UUID_LINE = /^[0-9a-f-]{36}$/

interface Round {
  owners: { uuid: string; pid: number }[]
  paused: string[]
  old: string[]
  aging: string[]
}

describe('torture: operator commands under crashes and contention', () => {
  it(`${ROUNDS} round(s): owners and reapers killed at random while every operator command runs at once`, { timeout: 900_000 }, async () => {
    const tree = makeTree()
    const config = join(tree.base, 'config.yaml')
    writeFileSync(config, 'locks:\n  heartbeat_seconds: 0.2\n  stale_after_seconds: 1\n')
    const common = ['--home', tree.base, '--config', config]
    const stats = { rounds: ROUNDS, owners_killed: 0, commands: 0, commands_killed: 0, reaped_once: 0, problems: 0 }
    const problems: string[] = []

    for (let round = 0; round < ROUNDS; round++) {
      const r = await seed(tree, round)
      const operators = Array.from({ length: 3 }, () => operatorLoop(r, common, stats, 2_500))
      await Promise.all(
        r.owners.map(async (o, i) => {
          await sleep(Math.random() * 1_500)
          process.kill(o.pid, 'SIGKILL')
          stats.owners_killed++
          await exitOf(ownerProcesses[i] as ChildProcess)
        }),
      )
      ownerProcesses.length = 0
      await Promise.all(operators)
      // The next pass, uninterrupted, once every dead owner's lock is stale.
      await sleep(1_300)
      for (const args of [
        ['watch-locks', '--once'],
        ['cleanup', '--compress-after', '1d', '--delete-after', '1000d'],
      ]) {
        const res = await cliAsync([...args, ...common])
        if (res.code !== 0) problems.push(`round ${round}: final ${args[0]} exit ${res.code}: ${res.stderr.trim()}`)
      }
      problems.push(...check(tree, r).map((p) => `round ${round}: ${p}`))
      stats.reaped_once += r.owners.filter((o) => reapedOnce(tree, o)).length
    }
    stats.problems = problems.length
    record('operators', stats)
    expect(problems).toEqual([])
    expect(stats.reaped_once).toBe(stats.owners_killed)
  })
})

const ownerProcesses: ChildProcess[] = []

/** Owners writing tasks, paused tasks to compress, completed ones old enough to delete and to gzip. */
async function seed(tree: Tree, round: number): Promise<Round> {
  const base = 0x1000 * (round + 1)
  const paused = [0, 1, 2].map((i) => uuidN(base + i))
  const old = [3, 4, 5].map((i) => uuidN(base + i))
  const aging = [6, 7, 8].map((i) => uuidN(base + i))
  for (const uuid of paused) tree.write({ uuid, location: 'paused', messages: 80, tools: 5 })
  for (const uuid of old) tree.write({ uuid, location: 'completed', messages: 40, completedAt: '2020-01-01T00:00:00.000Z' })
  const tenDays = new Date(Date.now() - 10 * 86_400_000).toISOString()
  for (const uuid of aging) tree.write({ uuid, location: 'completed', messages: 300, tools: 30, completedAt: tenDays })
  const owners = await Promise.all(
    Array.from({ length: OWNERS }, async () => {
      const child = helper('owner.mjs', [tree.base, 'write', '0.2'])
      ownerProcesses.push(child)
      const uuid = (await lineFrom(child, UUID_LINE)).trim()
      return { uuid, pid: child.pid as number }
    }),
  )
  return { owners, paused, old, aging }
}

/** One operator at a keyboard that is sometimes killed: random commands until `ms` is over. */
async function operatorLoop(r: Round, common: string[], stats: { commands: number; commands_killed: number }, ms: number): Promise<void> {
  const end = Date.now() + ms
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(Math.random() * xs.length)] as T
  while (Date.now() < end) {
    const args = pick([
      () => ['watch-locks', '--once'],
      () => ['cleanup', '--compress-after', '1d', '--delete-after', '1000d'],
      () => ['unlock', pick(r.owners).uuid],
      () => ['compress', pick(r.paused), '--extractive'],
      () => ['stats', '--json'],
      () => ['reindex'],
    ])()
    const child = spawn(process.execPath, [BIN, ...args, ...common], {
      cwd: ROOT,
      stdio: 'ignore',
      env: { ...process.env, NO_COLOR: '1', CTXAGENT_HOME: '', CTXAGENT_CONFIG: '' },
    })
    stats.commands++
    if (Math.random() < 0.4) {
      // Killed somewhere between starting up and finishing its work.
      await Promise.race([sleep(150 + Math.random() * 400), exitOf(child)])
      if (child.exitCode === null && child.signalCode === null) {
        child.kill('SIGKILL')
        stats.commands_killed++
      }
    }
    await exitOf(child)
  }
}

function check(tree: Tree, r: Round): string[] {
  const problems: string[] = []
  const places = taskPlaces(tree.base)
  for (const [uuid, place] of Object.entries(places)) if (place.includes('+')) problems.push(`${uuid} is in ${place}`)
  // recovery: resume (the default): a dead owner's task is paused to be resumed.
  for (const o of r.owners) if (places[o.uuid] !== 'paused') problems.push(`owner task ${o.uuid} is in ${places[o.uuid] ?? 'no place'}, not paused/`)
  for (const uuid of r.paused) if (places[uuid] !== 'paused') problems.push(`paused task ${uuid} is in ${places[uuid] ?? 'no place'}`)
  for (const uuid of r.aging) if (places[uuid] !== 'completed') problems.push(`aging task ${uuid} is in ${places[uuid] ?? 'no place'}`)
  for (const uuid of r.old) if (places[uuid] !== undefined) problems.push(`expired task ${uuid} was not deleted (${places[uuid]})`)
  for (const f of litter(tree.base)) problems.push(`litter: ${f}`)
  for (const f of unreadable(tree.base)) problems.push(`unreadable: ${f}`)
  for (const f of strayLocks(tree.base)) problems.push(`a lock left in ${f}`)
  if (tree.layout.list('running').length > 0) problems.push(`running/ still holds ${tree.layout.list('running').join(', ')}`)
  const indexed = indexedPlaces(tree.base)
  const settledPlaces = Object.fromEntries(Object.entries(places).sort())
  if (JSON.stringify(Object.fromEntries(Object.entries(indexed).sort())) !== JSON.stringify(settledPlaces)) {
    const diff = [...new Set([...Object.keys(indexed), ...Object.keys(places)])]
      .filter((u) => indexed[u] !== places[u])
      .map((u) => `${u.slice(0, 8)} index ${indexed[u] ?? '-'} dir ${places[u] ?? '-'}`)
    problems.push(`tasks.db differs from the directories: ${diff.join('; ')}`)
  }
  for (const o of r.owners) {
    if (places[o.uuid] !== 'paused') continue
    const lines = readFileSync(join(tree.layout.taskDir('paused', o.uuid), 'messages.jsonl'), 'utf8')
      .split('\n')
      .slice(0, -1)
    const seqs = lines.map((l) => (JSON.parse(l) as { seq: number }).seq)
    if (seqs.some((s, i) => s !== i + 1)) problems.push(`${o.uuid}: seq not continuous`)
  }
  return problems
}

/** Reaped exactly once: paused to be resumed, and the error names the owner that died, not a reaper killed on the way. */
function reapedOnce(tree: Tree, o: { uuid: string; pid: number }): boolean {
  try {
    const state = JSON.parse(readFileSync(join(tree.layout.taskDir('paused', o.uuid), 'state.json'), 'utf8')) as { status: string; error: string | null }
    return state.status === 'paused' && (state.error ?? '').includes(`pid ${o.pid} `)
  } catch {
    return false
  }
}
