// Validate prometheus-operator objects (ServiceMonitor, PrometheusRule, ...) against the CRD
// schemas shipped by @kubernetes-models/prometheus-operator (.tools/node_modules).
// Reads a JSON array of objects on stdin; prints one line per invalid object; exit 1 if any.
"use strict";
const path = require("path");
const models = require(path.resolve(process.argv[2], "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1"));

let input = "";
process.stdin.on("data", (chunk) => (input += chunk));
process.stdin.on("end", () => {
  let failed = 0;
  for (const obj of JSON.parse(input)) {
    const Model = models[obj.kind];
    if (obj.apiVersion !== "monitoring.coreos.com/v1" || !Model) {
      console.log(`${obj.kind}/${obj.metadata && obj.metadata.name}: not a monitoring.coreos.com/v1 kind this package knows`);
      failed++;
      continue;
    }
    try {
      new Model(obj).validate();
      console.log(`${obj.kind}/${obj.metadata.name}: valid`);
    } catch (e) {
      console.log(`${obj.kind}/${obj.metadata.name}: INVALID: ${e.message}`);
      failed++;
    }
  }
  process.exit(failed ? 1 : 0);
});
