// The setup of `npm run test:unit` (vitest.unit.config.ts): a test there may start no
// process, open no server and reach no database, so that the loop a developer runs while
// editing stays fast and needs nothing but Node. Each way out throws at once, naming itself.
import childProcess from 'node:child_process'
import { syncBuiltinESMExports } from 'node:module'
import net from 'node:net'

function refuse(what: string): never {
  throw new Error(`test:unit: ${what} is not allowed here (a test that needs it belongs to npm test only; see docs/development.md#tests)`)
}

for (const name of ['spawn', 'spawnSync', 'exec', 'execSync', 'execFile', 'execFileSync', 'fork'] as const) {
  Object.defineProperty(childProcess, name, { value: () => refuse(`child_process.${name}`), configurable: true, writable: true })
}
net.Server.prototype.listen = function listen(): never {
  return refuse('a listening server')
}
net.Socket.prototype.connect = function connect(): never {
  return refuse('a network connection')
}
// `import { spawn } from 'node:child_process'` reads the ESM view, updated only on request.
syncBuiltinESMExports()
