// Validates Gateway API objects (a JSON array on stdin) against the schemas generated from
// sigs.k8s.io/gateway-api's v1 types; prints one line per invalid object and exits 1 if any.
// The schemas check types, enums, patterns and required fields; like the API server's
// non-strict decoding they let unknown fields through.
import { readFileSync } from "node:fs";
import { Gateway, HTTPRoute } from "@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1";

const models = { Gateway, HTTPRoute };
const objects = JSON.parse(readFileSync(0, "utf8"));
let failed = 0;
for (const object of objects) {
  const Model = models[object.kind];
  if (!Model || object.apiVersion !== "gateway.networking.k8s.io/v1") {
    console.log(`${object.apiVersion} ${object.kind}: not a Gateway API v1 kind this checks`);
    failed += 1;
    continue;
  }
  try {
    new Model(object).validate();
  } catch (error) {
    console.log(`${object.kind} ${object.metadata?.name}: ${error.message}`);
    failed += 1;
  }
}
process.exit(failed ? 1 : 0);
