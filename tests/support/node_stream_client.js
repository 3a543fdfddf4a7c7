// SPDX-License-Identifier: Apache-2.0
// A token stream read by Node's own https module, as the JavaScript SDKs
// read theirs: POST the chat completion, print the body as it comes.
//   node node_stream_client.js URL CAFILE BODY
"use strict";
const fs = require("fs");
const https = require("https");

const [url, cafile, body] = process.argv.slice(2);
const request = https.request(url, {
  method: "POST",
  ca: fs.readFileSync(cafile),
  headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) },
}, (response) => {
  response.setEncoding("utf8");
  response.on("data", (chunk) => process.stdout.write(chunk));
  response.on("end", () => process.exit(response.statusCode === 200 ? 0 : 1));
});
request.on("error", (err) => {
  process.stderr.write(`node_stream_client: ${err.message}\n`);
  process.exit(2);
});
request.end(body);
