import { defineConfig } from 'vitest/config'

/**
 * The files that measure their whole process, each in a process of its own: heap-collect V8's heap
 * (a full GC of other files' garbage hid the growth it made, vitest.unit.config.ts), warm-fetch every
 * TCP handle and HTTP request of the process (another file's socket closing under it would miscount).
 */
const OWN_PROCESS = ['test/run/heap-collect.test.ts', 'test/fleet/warm-fetch.test.ts']

/** What both projects run with (not `extends: true`: the global setup below would run once more for each). */
const EACH = {
  // What a file leaves in process.env or its working directory is put back after it: files share processes, below.
  setupFiles: ['test/helpers/restore-env.ts'],
  // Multi-process tests spawn real children; give them room on a 2-core machine running three
  // files at once beside a busy neighbour (the longest took ~40 s with two at once under
  // stress-ng). A timeout here catches a hang; it measures nothing.
  testTimeout: 120_000,
  hookTimeout: 120_000,
  pool: 'forks' as const,
  // The built CLI that test/helpers/in-process.ts runs: loaded by Node as it is, as bin/ctxagent loads it.
  server: { deps: { external: [/\/bundle\//] } },
}

export default defineConfig({
  test: {
    // First, one line naming any system package the tests need and the machine lacks (docs/development.md#tests).
    // Then a directory where the PostgreSQL harness keeps one initdb to copy (test/helpers/pg-templates.ts).
    globalSetup: ['test/helpers/check-system.ts', 'test/helpers/pg-templates.ts'],
    // Three test files at once on CI's two cores: a file spends part of its time waiting on its
    // children, servers and fsyncs, and with two at once the cores were idle 18 % of the suite;
    // with three, about 1 % (a quiet run: 1,001 s of CI's suite → 837 s; docs/development.md#tests).
    maxWorkers: 3,
    projects: [
      // A file's worker process is reused by the next file: a process each cost about a second of CPU
      // per file (vitest's start and the file's imports) over ~260 files, about 3 minutes of CI.
      { test: { ...EACH, name: 'shared', include: ['test/**/*.test.ts'], exclude: [...OWN_PROCESS], isolate: false } },
      { test: { ...EACH, name: 'own-process', include: OWN_PROCESS } },
    ],
  },
})
