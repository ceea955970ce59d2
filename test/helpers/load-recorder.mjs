// `node --import <this file>`: every ES module the process loads is appended, one URL a line,
// to the file named by CTXAGENT_TEST_LOADS (test/e2e/start-loads.test.ts). The hooks run on
// Node's loader thread (module.register, Node 20.6+); they only watch.
import { register } from 'node:module'

register('./load-recorder-hooks.mjs', import.meta.url)
