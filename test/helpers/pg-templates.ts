// vitest.config.ts's globalSetup: a directory for this run's initdb results, which
// test/helpers/postgres.ts copies for each server instead of running initdb again; removed
// after the run. The workers inherit the environment variable naming it.
import { chmodSync, mkdtempSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import { clusterTmp, TEMPLATES_ENV } from './postgres.js'

export default function pgTemplates(): () => void {
  const dir = mkdtempSync(join(clusterTmp(), 'ctxagent-pg-templates-'))
  // As root, initdb runs as the server's user, in a directory of its own under this one.
  chmodSync(dir, 0o711)
  process.env[TEMPLATES_ENV] = dir
  return () => rmSync(dir, { recursive: true, force: true })
}
