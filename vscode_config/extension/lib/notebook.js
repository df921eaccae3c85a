// The notebook in the failed frame: a controller for VS Code's built-in notebook editor
// (the "jupyter-notebook" type of the built-in ipynb support, nothing downloaded) whose
// cells run in the task's process, in the frame where it failed, through the session's
// control API (POST /api/notebook/execute, /interrupt, /open). Outputs come back as
// Jupyter's mime bundles and are shown with VS Code's built-in renderers.
'use strict';

const client = require('./client');
const { fromFile } = require('./session');

const CONTROLLER_ID = 'podcode-failed-frame';
const NOTEBOOK_TYPE = 'jupyter-notebook';
// An interrupt that finds no cell running while one is in flight is sent again this often,
// this many times (the cell's request may not have reached the task yet).
const INTERRUPT_RETRY_MS = 100;
const INTERRUPT_ATTEMPTS = 30;
const RICHEST_FIRST = ['image/png', 'text/html', 'text/plain'];

// One output of the kernel ({type: stream|display|error}) as VS Code's NotebookCellOutput.
function cellOutput(vscode, output) {
  const Item = vscode.NotebookCellOutputItem;
  if (output.type === 'stream') {
    const item = output.name === 'stderr' ? Item.stderr(output.text) : Item.stdout(output.text);
    return new vscode.NotebookCellOutput([item]);
  }
  if (output.type === 'error') {
    const error = new Error(output.evalue);
    error.name = output.ename;
    error.stack = output.traceback;
    return new vscode.NotebookCellOutput([Item.error(error)]);
  }
  const data = output.data || {};
  const items = RICHEST_FIRST.filter((mime) => typeof data[mime] === 'string').map((mime) => (
    mime === 'image/png'
      ? new Item(Buffer.from(data[mime], 'base64'), mime)
      : Item.text(data[mime], mime)));
  return new vscode.NotebookCellOutput(items);
}

function cellOutputs(vscode, body) {
  return ((body && body.outputs) || []).map((output) => cellOutput(vscode, output));
}

// What a refused or failed call shows in the cell.
function failureOutput(vscode, message) {
  const error = new Error(message);
  error.name = 'podcode';
  error.stack = message;
  return [new vscode.NotebookCellOutput([vscode.NotebookCellOutputItem.error(error)])];
}

function answerError(answer) {
  if (answer.body && answer.body.error) {
    return answer.body.error;
  }
  return answer.status === 200 ? 'the session\'s answer broke off before the cell\'s result (did the session end?)'
    : `the session answered ${answer.status}`;
}

// The sessions a notebook can run in: this IDE's own, and in a distributed task each other
// local rank's (its session file, read when used: a rank is in a session once it failed).
function targets(session) {
  const own = { key: 'own', label: Number.isInteger(session.localRank)
    ? `local rank ${session.localRank}` : 'this task', detail: 'the failed frame this IDE debugs' };
  return [own, ...(session.ranks || []).map((rank) => ({
    key: `rank-${rank.local_rank}`, label: `local rank ${rank.local_rank}`,
    detail: 'its own process and failed frame', record: rank.record,
  }))];
}

// {session} for a target, or {problem} in words.
function targetSession(target, currentSession) {
  if (!target.record) {
    const session = currentSession();
    return session ? { session } : { problem: 'no podcode session found' };
  }
  const found = fromFile(target.record);
  return found.session ? { session: found.session }
    : { problem: found.problem || `${target.label} is not in a session: its task has not failed, or its session has ended` };
}

function register(vscode, context, { currentSession, log }) {
  const controllers = new Map(); // target key -> its notebook controller

  async function run(execution, cell, session) {
    execution.clearOutput(); // not awaited: the edits keep their order, the cell starts at once
    let ok = false;
    const printed = []; // shown while the cell runs; its answer replaces them
    const showPrinted = (output) => {
      const last = printed[printed.length - 1];
      if (last && last.name === output.name) {
        last.text += output.text;
      } else {
        printed.push({ ...output });
      }
      execution.replaceOutput(cellOutputs(vscode, { outputs: printed }));
    };
    try {
      const answer = await client.executeStreaming(session, cell.document.getText(), showPrinted);
      if (answer.status === 200 && answer.body) {
        execution.executionOrder = answer.body.execution_count;
        await execution.replaceOutput(cellOutputs(vscode, answer.body));
        ok = Boolean(answer.body.ok);
      } else {
        await execution.replaceOutput(failureOutput(vscode, answerError(answer)));
      }
    } catch (err) {
      await execution.replaceOutput(failureOutput(vscode, `the session did not answer: ${err.message}`));
    }
    execution.end(ok, Date.now());
  }

  // The kernel of one target: the own one is there from the start; a rank's once opened.
  function controllerFor(target) {
    if (controllers.has(target.key)) {
      return controllers.get(target.key);
    }
    const id = target.key === 'own' ? CONTROLLER_ID : `${CONTROLLER_ID}-${target.key}`;
    const controller = vscode.notebooks.createNotebookController(
      id, NOTEBOOK_TYPE, 'podcode: failed frame');
    controller.supportedLanguages = ['python'];
    controller.supportsExecutionOrder = true;
    controller.description = target.record
      ? `cells run in ${target.label}'s failed frame, in its process`
      : 'cells run in the failed task\'s frame, in its process';
    let inFlight = 0; // cells posted to the session and not answered yet
    let interrupts = 0; // cells queued before an interrupt do not run (as in Jupyter)
    controller.executeHandler = async (cells) => {
      const { session, problem } = targetSession(target, currentSession);
      const queuedAfter = interrupts;
      for (const cell of cells) {
        const execution = controller.createNotebookCellExecution(cell);
        execution.start(Date.now());
        if (!session) {
          await execution.replaceOutput(failureOutput(vscode, problem));
          execution.end(false, Date.now());
        } else if (interrupts !== queuedAfter) {
          execution.end(false, Date.now());
        } else {
          inFlight += 1;
          try {
            await run(execution, cell, session);
          } finally {
            inFlight -= 1;
          }
        }
      }
    };
    controller.interruptHandler = async () => {
      interrupts += 1;
      const { session } = targetSession(target, currentSession);
      if (!session) {
        return;
      }
      try {
        // A cell posted a moment ago may not run in the task yet (the session answers
        // "idle"): ask again until it does, or until no cell is in flight.
        for (let attempt = 0; attempt < INTERRUPT_ATTEMPTS; attempt += 1) {
          const answer = await client.interrupt(session);
          const result = answer.body && answer.body.result;
          if (result === 'native') {
            vscode.window.showWarningMessage('podcode: the cell is blocked in native code; it stops when that call returns to Python');
          }
          if (result !== 'idle' || inFlight === 0) {
            return;
          }
          await new Promise((resolve) => { setTimeout(resolve, INTERRUPT_RETRY_MS); });
        }
      } catch (err) {
        log(`interrupt failed: ${err.message}`);
      }
    };
    controllers.set(target.key, controller);
    context.subscriptions.push(controller);
    return controller;
  }

  // Which session's frame: this IDE's, or (a distributed task) the local rank picked.
  async function choose(session) {
    const all = targets(session);
    if (all.length === 1) {
      return all[0];
    }
    return vscode.window.showQuickPick(all, {
      title: 'podcode: open the notebook of which rank?',
      placeHolder: 'each rank\'s notebook runs in that rank\'s failed frame',
    });
  }

  async function open() {
    const session = currentSession();
    if (!session) {
      vscode.window.showErrorMessage('podcode: no session: no failed frame to open a notebook on');
      return;
    }
    const target = await choose(session);
    if (!target) {
      return;
    }
    const { session: own, problem } = targetSession(target, currentSession);
    if (!own) {
      vscode.window.showErrorMessage(`podcode: no notebook: ${problem}`);
      return;
    }
    try {
      const answer = await client.openNotebook(own);
      if (answer.status !== 200 || !answer.body) {
        vscode.window.showErrorMessage(`podcode: no notebook: ${answerError(answer)}`);
        return;
      }
      const controller = controllerFor(target);
      controller.label = answer.body.label;
      const uri = vscode.Uri.file(answer.body.path);
      const shown = vscode.window.visibleNotebookEditors.some(
        (editor) => editor.notebook.uri.toString() === uri.toString());
      const document = await vscode.workspace.openNotebookDocument(uri);
      controller.updateNotebookAffinity(document, vscode.NotebookControllerAffinity.Preferred);
      const editor = await vscode.window.showNotebookDocument(document);
      await vscode.commands.executeCommand('notebook.selectKernel',
        { id: controller.id, extension: context.extension.id });
      if (!shown && Number.isInteger(answer.body.cell) && answer.body.cell < document.cellCount) {
        // Newly shown: the cursor waits in the starter's empty cell, ready for a first cell.
        const range = new vscode.NotebookRange(answer.body.cell, answer.body.cell + 1);
        editor.selections = [range];
        editor.revealRange(range);
        await vscode.commands.executeCommand('notebook.cell.edit');
      }
    } catch (err) {
      vscode.window.showErrorMessage(`podcode: could not open the notebook: ${err.message}`);
    }
  }

  controllerFor(targets({})[0]); // this IDE's own kernel, there from the start
  const item = vscode.window.createStatusBarItem('podcode.notebook', vscode.StatusBarAlignment.Left, 99);
  item.name = 'podcode notebook';
  item.text = '$(notebook) notebook';
  item.tooltip = 'podcode: Open notebook on the failure (its cells run in the failed frame)';
  item.command = 'podcode.openNotebook';
  context.subscriptions.push(item, vscode.commands.registerCommand('podcode.openNotebook', open));
  return { open, item };
}

// The status bar's notebook item is there while the task waits in the session.
function showWhile(item, state) {
  if (!item) {
    return;
  }
  if (['waiting', 'warned'].includes(state)) {
    item.show();
  } else {
    item.hide();
  }
}

module.exports = { register, cellOutputs, showWhile, targets, CONTROLLER_ID };
