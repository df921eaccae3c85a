// What the companion takes from vscode-languageclient: its Node.js client (LanguageClient,
// TransportKind). Bundled into extension/lib/languageclient.js; "vscode" stays external.
'use strict';

module.exports = require('vscode-languageclient/node');
