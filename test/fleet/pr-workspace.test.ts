import { execFileSync } from 'node:child_process'
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:http'
import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { describe, expect, it, onTestFinished } from 'vitest'
import { checkoutPrHead } from '../../src/workspace/pr-workspace.js'
import { gitHttpHandler } from '../helpers/git-http.js'

const TOKEN = 'ghp_prworkspace0000000000000000000000000'

function git(dir: string, ...args: string[]): string {
  return execFileSync(
    'git',
    ['-c', 'safe.directory=*', '-c', 'user.name=T', '-c', 'user.email=t@example.invalid', '-c', 'init.defaultBranch=main', '-C', dir, ...args],
    {
      encoding: 'utf8',
      env: { PATH: process.env.PATH, HOME: '/nonexistent', GIT_CONFIG_NOSYSTEM: '1' },
    },
  ).trim()
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return `127.0.0.1:${(server.address() as AddressInfo).port}`
}

describe('the fetch of a pull request’s head into a workspace an agent wrote to', () => {
  it('reads none of its http.proxy, url.*.insteadOf or core.alternateRefsCommand while the token is in git’s hands', async () => {
    const root = mkdtempSync(join(tmpdir(), 'ctxagent-prws-'))
    onTestFinished(() => rmSync(root, { recursive: true, force: true }))
    const served = join(root, 'served')
    const bare = join(served, 'acme', 'shop.git')
    mkdirSync(bare, { recursive: true })
    git(bare, 'init', '--quiet', '--bare')
    const seed = join(root, 'seed')
    mkdirSync(seed)
    git(seed, 'init', '--quiet')
    writeFileSync(join(seed, 'a.txt'), 'one\n')
    git(seed, 'add', '-A')
    git(seed, 'commit', '--quiet', '-m', 'one')
    git(seed, 'push', '--quiet', bare, 'main')
    writeFileSync(join(seed, 'a.txt'), 'two\n')
    git(seed, 'commit', '--quiet', '-am', 'two')
    git(seed, 'push', '--quiet', bare, 'main:fix')
    const head = git(seed, 'rev-parse', 'HEAD')

    const auth: (string | null)[] = []
    const forge = await listen(createServer(gitHttpHandler(served, 'x-access-token', TOKEN, auth)))
    const seen: string[] = []
    const elsewhere = await listen(
      createServer((req, res) => {
        seen.push(`${req.url ?? ''} ${req.headers.authorization ?? req.headers['proxy-authorization'] ?? ''}`)
        res.writeHead(401, { 'www-authenticate': 'Basic realm="x"' }).end()
      }),
    )
    const url = `http://${forge}/acme/shop.git`
    // The task's own clone (fleet.workspaces_dir/<uuid>), the agent's to write, .git included.
    const workspacesDir = join(root, 'workspaces')
    const ws = join(workspacesDir, 'u1')
    mkdirSync(ws, { recursive: true })
    git(ws, 'init', '--quiet')
    git(ws, 'fetch', '--quiet', bare, 'main')
    git(ws, 'checkout', '--quiet', 'FETCH_HEAD')
    git(ws, 'remote', 'add', 'origin', url)
    const proof = join(root, 'proof')
    mkdirSync(proof)
    chmodSync(proof, 0o777)
    const script = join(root, 'alt-refs')
    writeFileSync(script, `#!/bin/sh\ntouch ${proof}/alternate-refs\n`)
    chmodSync(script, 0o755)
    const other = join(root, 'other.git')
    git(root, 'init', '--quiet', '--bare', other)
    writeFileSync(join(ws, '.git', 'objects', 'info', 'alternates'), `${join(other, 'objects')}\n`)
    git(ws, 'config', 'core.alternateRefsCommand', script)
    git(ws, 'config', `http.${url}.proxy`, `http://${elsewhere}`)
    git(ws, 'config', `url.http://${elsewhere}/.insteadOf`, `http://${forge}/`)

    const placed = await checkoutPrHead({
      workspace: ws,
      uuid: 'u1',
      workspacesDir,
      head: { branch: 'fix', number: 7, url: `http://${forge}/acme/shop/pull/7` },
      forge: 'github',
      credentials: [{ host: forge, username: 'x-access-token', token: TOKEN }],
    })
    expect(placed.checkedOut).toBe(true)
    expect(git(ws, 'rev-parse', 'HEAD')).toBe(head)
    expect(seen).toEqual([])
    expect(readdirSync(proof)).toEqual([])
    expect(auth).toContain(`Basic ${Buffer.from(`x-access-token:${TOKEN}`).toString('base64')}`)
  })

  it('never fetches from an origin that is not the pull request’s repository (an earlier round could have rewritten it)', async () => {
    const root = mkdtempSync(join(tmpdir(), 'ctxagent-prws-'))
    onTestFinished(() => rmSync(root, { recursive: true, force: true }))
    const auth: (string | null)[] = []
    const forge = await listen(createServer(gitHttpHandler(root, 'x-access-token', TOKEN, auth)))
    const ws = join(root, 'workspaces', 'u1')
    mkdirSync(ws, { recursive: true })
    git(ws, 'init', '--quiet')
    git(ws, 'remote', 'add', 'origin', `http://${forge}/acme/private-other.git`)
    const placing = checkoutPrHead({
      workspace: ws,
      uuid: 'u1',
      workspacesDir: join(root, 'workspaces'),
      head: { branch: 'fix', number: 7, url: `http://${forge}/acme/shop/pull/7` },
      forge: 'github',
      credentials: [{ host: forge, username: 'x-access-token', token: TOKEN }],
      notOurs: (url) => (url.endsWith('/acme/shop.git') ? null : `the workspace's origin (${url}) is not acme/shop: nothing pushed`),
    })
    await expect(placing).rejects.toThrow(/is not acme\/shop: its head branch is not fetched from there/)
    expect(auth).toEqual([])
  })
})
