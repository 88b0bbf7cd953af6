// Compiles every schema/*.schema.json with ajv in strict mode (draft
// 2020-12, formats from ajv-formats), all of them in one Ajv instance so
// that their relative $refs resolve, and fails on the first that does not
// compile. A schema that compiles here is one a JavaScript agent can
// validate against without turning strict mode off.
//
//   NODE_PATH=.ci/npm/node_modules node .ci/ajv-strict.cjs [schema dir]
const fs = require("fs");
const path = require("path");
const Ajv2020 = require("ajv/dist/2020").default;
const addFormats = require("ajv-formats").default;

const dir = process.argv[2] || path.join(__dirname, "..", "schema");
const files = fs.readdirSync(dir).filter((f) => f.endsWith(".schema.json")).sort();
const ajv = new Ajv2020({ strict: true, allErrors: true });
addFormats(ajv);
for (const f of files) {
  ajv.addSchema(JSON.parse(fs.readFileSync(path.join(dir, f), "utf8")));
}
let failed = 0;
for (const f of files) {
  const s = JSON.parse(fs.readFileSync(path.join(dir, f), "utf8"));
  try {
    ajv.getSchema(s.$id) || ajv.compile(s);
    console.log("ok   " + f);
  } catch (e) {
    failed++;
    console.log("FAIL " + f + ": " + e.message);
  }
}
if (files.length === 0) {
  console.log("no schema files in " + dir);
  process.exit(1);
}
process.exit(failed ? 1 : 0);
