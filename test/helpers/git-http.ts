import { spawn } from 'node:child_process'
import { createServer } from 'node:http'
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { onTestFinished } from 'vitest'

export interface GitHttp {
  /** http://127.0.0.1:<port> : repositories under it by their path below `root`. */
  url: string
  /** The `Authorization` header of every request, as it came (null: none). */
  auth: (string | null)[]
}

/** Answers git's smart HTTP for the bare repositories under `root` (as `git http-backend`, CGI), to requests that pass `allowed`. */
export type GitHandler = (req: IncomingMessage, res: ServerResponse) => void

/**
 * Git's smart HTTP (`git http-backend`, as CGI) for the bare repositories under `root`,
 * to whoever gives Basic `user`:`token` (or `Bearer token`); anyone else gets 401 (and
 * git asks its credential helpers). Each request's Authorization header is pushed to `auth`.
 */
export function gitHttpHandler(root: string, user: string, token: string, auth: (string | null)[]): GitHandler {
  const expected = [`Basic ${Buffer.from(`${user}:${token}`).toString('base64')}`, `Bearer ${token}`]
  return (req, res) => {
    auth.push(req.headers.authorization ?? null)
    if (!expected.includes(req.headers.authorization ?? '')) {
      res.writeHead(401, { 'www-authenticate': 'Basic realm="git"' })
      res.end('authentication required\n')
      return
    }
    const url = new URL(req.url ?? '/', 'http://x')
    const cgi = spawn('git', ['http-backend'], {
      env: {
        PATH: process.env.PATH,
        GIT_PROJECT_ROOT: root,
        GIT_HTTP_EXPORT_ALL: '1',
        REQUEST_METHOD: req.method ?? 'GET',
        PATH_INFO: decodeURIComponent(url.pathname),
        QUERY_STRING: url.search.slice(1),
        CONTENT_TYPE: req.headers['content-type'] ?? '',
        ...(req.headers['content-length'] !== undefined ? { CONTENT_LENGTH: req.headers['content-length'] } : {}),
        ...(req.headers['content-encoding'] !== undefined ? { HTTP_CONTENT_ENCODING: req.headers['content-encoding'] } : {}),
        ...(req.headers['git-protocol'] !== undefined ? { GIT_PROTOCOL: String(req.headers['git-protocol']) } : {}),
        REMOTE_USER: user,
        REMOTE_ADDR: '127.0.0.1',
      },
      stdio: ['pipe', 'pipe', 'ignore'],
    })
    req.pipe(cgi.stdin)
    let head = Buffer.alloc(0)
    let sent = false
    cgi.stdout.on('data', (chunk: Buffer) => {
      if (sent) return void res.write(chunk)
      head = Buffer.concat([head, chunk])
      const end = head.indexOf('\r\n\r\n')
      if (end < 0) return
      const headers: Record<string, string> = {}
      let status = 200
      for (const line of head.subarray(0, end).toString().split('\r\n')) {
        const colon = line.indexOf(':')
        const name = line.slice(0, colon).trim().toLowerCase()
        const value = line.slice(colon + 1).trim()
        if (name === 'status') status = Number.parseInt(value, 10)
        else headers[name] = value
      }
      res.writeHead(status, headers)
      sent = true
      res.write(head.subarray(end + 4))
    })
    cgi.on('close', () => {
      if (!sent) res.writeHead(500)
      res.end()
    })
  }
}

/**
 * Git's smart HTTP server on 127.0.0.1 serving the bare repositories under `root` to
 * whoever gives Basic `user`:`token`; anyone else gets 401. Stopped when the test ends.
 */
export async function startGitHttp(root: string, user: string, token: string): Promise<GitHttp> {
  const auth: (string | null)[] = []
  const server = createServer(gitHttpHandler(root, user, token, auth))
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  onTestFinished(
    () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      }),
  )
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, auth }
}
