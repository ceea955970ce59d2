import { execFile } from 'node:child_process'
import { createServer } from 'node:http'
import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { describe, expect, it, onTestFinished } from 'vitest'
import { HELPER, helperEnv } from '../../src/delivery/credential-helper.js'

const TOKEN = 'ghp_helpertest000000000000000000000000'

async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return (server.address() as AddressInfo).port
}

/** `git ls-remote url` with the helper answering for `given` (the URL the token was meant for). */
function lsRemote(url: string, given: string): Promise<string> {
  const env = {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: '/nonexistent',
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_TERMINAL_PROMPT: '0',
    ...helperEnv(given, 'x-access-token', TOKEN),
  }
  return new Promise((resolve) => {
    execFile('git', ['-c', 'credential.helper=', '-c', `credential.helper=${HELPER}`, 'ls-remote', url], { env }, (err, _out, stderr) =>
      resolve(err === null ? '' : String(stderr)),
    )
  })
}

describe('the credential helper', () => {
  it('gives the token to the origin it was given for, and to no host git is sent to instead (a redirect)', async () => {
    const seen: string[] = []
    const elsewhere = createServer((req, res) => {
      seen.push(req.headers.authorization ?? '')
      res.writeHead(401, { 'www-authenticate': 'Basic realm="x"' }).end()
    })
    const other = await listen(elsewhere)
    const forge = await listen(createServer((req, res) => res.writeHead(302, { location: `http://localhost:${other}${req.url ?? '/'}` }).end()))
    const basic = `Basic ${Buffer.from(`x-access-token:${TOKEN}`).toString('base64')}`

    // The forge redirects the push to another host: git asks the helper for that host, and gets nothing.
    const url = `http://127.0.0.1:${forge}/acme/shop.git`
    expect(await lsRemote(url, url)).toMatch(/could not read Username|Authentication failed/)
    expect(seen.length).toBeGreaterThan(0)
    expect(seen).not.toContain(basic)

    // The same helper answers for the origin it was given (so the refusal above is the host's).
    const direct = `http://localhost:${other}/acme/shop.git`
    await lsRemote(direct, direct)
    expect(seen).toContain(basic)
  })

  it('a default port is the same origin', () => {
    expect(helperEnv('https://GitHub.com:443/a/b.git', 'u', 't')?.CTXAGENT_GIT_ORIGIN).toBe('https://github.com')
    expect(helperEnv('git@github.com:a/b.git', 'u', 't')).toBeNull()
  })
})
