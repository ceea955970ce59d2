import { afterAll } from 'vitest'

/*
 * Test files share their worker processes (vitest.config.ts: isolate false): what one file sets
 * in process.env, its working directory and its exit code must not reach the next. Each file's
 * are put back as they were when it started.
 */
const env = { ...process.env }
const cwd = process.cwd()

afterAll(() => {
  for (const key of Object.keys(process.env)) if (!(key in env)) delete process.env[key]
  Object.assign(process.env, env)
  process.chdir(cwd)
  process.exitCode = undefined
})
