import { defineConfig } from 'vitest/config'

/** The files that measure V8's heap: each in a process of its own, where no other file's garbage is collected under it (vitest.unit.config.ts). */
const HEAP = ['test/run/heap-collect.test.ts']

export default defineConfig({
  test: {
    // First, one line naming any system package the tests need and the machine lacks (docs/development.md#tests).
    // Then a directory where the PostgreSQL harness keeps one initdb to copy (test/helpers/pg-templates.ts).
    globalSetup: ['test/helpers/check-system.ts', 'test/helpers/pg-templates.ts'],
    // What a file leaves in process.env or its working directory is put back after it: files share processes, below.
    setupFiles: ['test/helpers/restore-env.ts'],
    // Multi-process tests spawn real children; give them room on a 2-core machine.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 2,
    // The built CLI that test/helpers/in-process.ts runs: loaded by Node as it is, as bin/ctxagent loads it.
    server: { deps: { external: [/\/bundle\//] } },
    projects: [
      // A file's worker process is reused by the next file: a process each cost about a second of CPU
      // per file (vitest's start and the file's imports) over ~260 files, about 3 minutes of CI.
      { extends: true, test: { name: 'shared', include: ['test/**/*.test.ts'], exclude: HEAP, isolate: false } },
      { extends: true, test: { name: 'heap', include: HEAP } },
    ],
  },
})
