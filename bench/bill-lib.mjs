// Shared by the bill benches (bill.mjs, bill-anthropic.mjs): the task both run (read_file on
// ~9 KB files, one a turn), a zero-latency LLM server answering JSON, and `ctxagent run`.
import { spawn } from 'node:child_process'
import { createServer } from 'node:http'
import { mkdirSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { agentText, rng, ROOT } from './lib.mjs'

const BIN = join(ROOT, 'bin', 'ctxagent')

/** Tokens as ctxagent estimates them (chars / 4; the workspace is not Japanese). */
export const tokens = (text) => Math.ceil(text.length / 4)

/** A workspace of `n` files of ~9 KB (read_file's numbered lines make ~9.3 KB of output). */
export function workspace(dir, n) {
  mkdirSync(dir, { recursive: true })
  const random = rng(30)
  for (let i = 0; i < n; i++) writeFileSync(join(dir, `f${i}.txt`), agentText(random, 8_800))
}

/**
 * An LLM server on 127.0.0.1: `answer(body, raw)` gives the JSON of the reply to each request
 * (status 200). `path` is appended to the URL (`/v1` for the OpenAI-compatible one).
 */
export async function startJsonServer(answer, path = '') {
  const server = createServer((req, res) => {
    const chunks = []
    req.on('data', (d) => chunks.push(d))
    req.on('end', () => {
      const raw = Buffer.concat(chunks)
      const reply = answer(JSON.parse(raw.toString()), raw)
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify(reply))
    })
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { url: `http://127.0.0.1:${server.address().port}${path}`, close: () => new Promise((resolve) => server.close(resolve)) }
}

/** `ctxagent run` of the task over `rounds` files of `ws`, its tree in `base`/home; throws unless it exits 0. */
export async function runTask({ base, ws, config, rounds, env = process.env }) {
  const args = [
    'run',
    '--task',
    `Read every file f0.txt to f${rounds - 1}.txt of the workspace, one per turn, and report what they hold.`,
    '--workspace',
    ws,
    '--home',
    join(base, 'home'),
    '--config',
    config,
    '--log-format',
    'json',
    '--max-turns',
    String(rounds + 10),
  ]
  let stderr = ''
  const code = await new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, ...args], { cwd: ws, stdio: ['ignore', 'ignore', 'pipe'], env })
    child.stderr.on('data', (d) => (stderr = (stderr + d).slice(-4000)))
    child.once('exit', resolve)
  })
  if (code !== 0) throw new Error(`ctxagent run exited ${code}: ${stderr}`)
}
