/*
 * Inside a `network: proxy` sandbox there is no network but the sandbox's own loopback,
 * and programs expect an HTTP proxy at a TCP address (HTTP_PROXY). A forwarder started
 * before the command, as the same user under the same limits, listens on 127.0.0.1:PORT
 * there and carries each connection to the egress proxy's Unix socket, bound in at
 * SOCKET_INSIDE (egress-proxy.ts decides and logs). It is node (ctxagent's own, shown
 * read-only), single-threaded as far as node goes. The command could stop it: it then
 * has no network at all, which it had not anyway. docs/security.md#the-network.
 */

/** The port the forwarder listens on, in the sandbox's own network namespace (nothing else uses it there). */
export const FORWARD_PORT = 3128
/** Where the proxy's socket is bound inside the sandbox. */
export const SOCKET_INSIDE = '/run/ctxagent/egress.sock'

/**
 * The forwarder (node -e): argv is [port, socket]. It says `ready` on fd 3 once it
 * listens and closes it, so the shell that started it goes on (fd 1 is /dev/null: node
 * keeps its stdout to itself).
 */
const FORWARDER = [
  "const net = require('net'), fs = require('fs')",
  'const [port, sock] = process.argv.slice(1)',
  'const server = net.createServer((c) => {',
  '  const u = net.connect(sock)',
  '  c.pipe(u); u.pipe(c)',
  '  const end = () => { c.destroy(); u.destroy() }',
  "  c.on('error', end); u.on('error', end); c.on('close', end); u.on('close', end)",
  '})',
  "server.listen(Number(port), '127.0.0.1', () => { fs.writeSync(3, 'ready\\n'); fs.closeSync(3) })",
].join('\n')

/**
 * `argv` run after the forwarder is up (`node`: the words that start node): a shell starts it in the background, waits for
 * its `ready` (or says it did not start, exit 125), then becomes the command.
 */
export function withForwarder(node: readonly string[], argv: readonly string[]): string[] {
  const prelude = [
    `ready=$(${node.map(quoted).join(' ')} --v8-pool-size=1 -e "$1" "$2" "$3" 3>&1 >/dev/null &)`,
    'if [ "$ready" != ready ]; then echo "ctxagent: the network proxy forwarder did not start inside the sandbox" >&2; exit 125; fi',
    'shift 3',
    'exec "$@"',
  ].join('\n')
  return ['/bin/sh', '-c', prelude, 'sh', FORWARDER, String(FORWARD_PORT), SOCKET_INSIDE, ...argv]
}

/** A word for sh, single-quoted: node's path, whatever it holds. */
const quoted = (word: string): string => `'${word.replaceAll("'", "'\\''")}'`

/** The variables that point programs (curl, git, npm, pip, node 24's fetch…) at the forwarder; loopback stays direct. */
export function proxyEnv(): Record<string, string> {
  const url = `http://127.0.0.1:${FORWARD_PORT}`
  const direct = 'localhost,127.0.0.1,::1'
  return {
    HTTP_PROXY: url,
    HTTPS_PROXY: url,
    http_proxy: url,
    https_proxy: url,
    ALL_PROXY: url,
    all_proxy: url,
    NO_PROXY: direct,
    no_proxy: direct,
    npm_config_proxy: url,
    npm_config_https_proxy: url,
    NODE_USE_ENV_PROXY: '1',
  }
}
