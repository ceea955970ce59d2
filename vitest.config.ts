import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // First, one line naming any system package the tests need and the machine lacks (docs/development.md#tests).
    // Then a directory where the PostgreSQL harness keeps one initdb to copy (test/helpers/pg-templates.ts).
    globalSetup: ['test/helpers/check-system.ts', 'test/helpers/pg-templates.ts'],
    // Multi-process tests spawn real children; give them room on a 2-core machine.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 2,
  },
})
