import { Command, InvalidArgumentError, Option } from 'commander'
import type { CommandEnv } from '../command-env.js'
import { CtxError, isErrno, UsageError } from '../errors.js'
import { isLoopback } from '../serve/auth.js'
import { stopSignal, withEnv } from '../command-kit/shared.js'
import { serveToken } from '../command-kit/serve-token.js'

interface ServeOptions {
  host?: string
  port?: number
}

export function serveCommand(): Command {
  return new Command('serve')
    .description('a page to watch and steer tasks and the fleet, Prometheus /metrics and a JSON /api (read-only without serve.token)')
    .addOption(
      new Option(
        '--host <address>',
        'address to listen on; any but loopback needs serve.token or CTXAGENT_SERVE_TOKEN (default: config serve.host, 127.0.0.1)',
      ),
    )
    .addOption(new Option('--port <n>', 'port to listen on, 0 for any free one (default: config serve.port, 7878)').argParser(portArg))
    .addHelpText(
      'after',
      `
Examples:
  $ ctxagent serve                                  the page on http://127.0.0.1:7878
  $ CTXAGENT_SERVE_TOKEN=$(openssl rand -hex 32) ctxagent serve --host 0.0.0.0
  $ curl -s localhost:7878/metrics | grep ctxagent_tasks
  $ curl -s -X POST -H "Authorization: Bearer $T" localhost:7878/api/tasks/<uuid>/pause`,
    )
    .action(withEnv(serve))
}

function portArg(value: string): number {
  const n = Number(value)
  if (!/^\d+$/.test(value.trim()) || n > 65535) throw new InvalidArgumentError('must be a port number from 0 to 65535')
  return n
}

async function serve(ctx: CommandEnv, opts: ServeOptions): Promise<void> {
  const host = opts.host ?? ctx.config.serve.host
  const port = opts.port ?? ctx.config.serve.port
  if (host.trim() === '') throw new UsageError('--host is empty', 'give an address such as 127.0.0.1')
  const token = serveToken(ctx)
  if (!isLoopback(host) && token === null) {
    throw new UsageError(`serving on ${host} (not loopback) needs a token`, 'set serve.token in the config or CTXAGENT_SERVE_TOKEN, or serve on 127.0.0.1')
  }
  let served
  try {
    // Loaded only here: prom-client and the page cost every other command nothing at start-up.
    const { startServer } = await import('../serve/server.js')
    served = await startServer(ctx, { host, port, token })
  } catch (err) {
    if (isErrno(err, 'EADDRINUSE')) throw new CtxError(`port ${port} on ${host} is already in use`, { hint: 'give another --port, or stop what listens there' })
    if (isErrno(err, 'EADDRNOTAVAIL') || isErrno(err, 'ENOTFOUND'))
      throw new UsageError(`cannot listen on ${host}: no such address on this host`, 'give one of its addresses, or 127.0.0.1')
    if (isErrno(err, 'EACCES')) throw new CtxError(`not allowed to listen on port ${port}`, { hint: 'ports below 1024 need privileges: give a higher --port' })
    throw err
  }
  const { stopped, dispose } = stopSignal()
  try {
    if (ctx.json) ctx.io.json({ url: served.url, token: token !== null })
    else ctx.io.out(`serving ${ctx.layout.base} on ${served.url}${token === null ? ' (read-only: no serve.token)' : ''}`)
    await stopped
  } finally {
    dispose()
    await served.close()
  }
}
