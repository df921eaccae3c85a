// The notebook in the failed frame: a controller for VS Code's built-in notebook editor
// (the "jupyter-notebook" type of the built-in ipynb support, nothing downloaded) whose
// cells run in the task's process, in the frame where it failed, through the session's
// control API (POST /api/notebook/execute, /interrupt, /open). Outputs come back as
// Jupyter's mime bundles and are shown with VS Code's built-in renderers.
'use strict';

const client = require('./client');

const CONTROLLER_ID = 'podcode-failed-frame';
const NOTEBOOK_TYPE = 'jupyter-notebook';
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
  return answer.body && answer.body.error ? answer.body.error : `the session answered ${answer.status}`;
}

function register(vscode, context, { currentSession, log }) {
  const controller = vscode.notebooks.createNotebookController(
    CONTROLLER_ID, NOTEBOOK_TYPE, 'podcode: failed frame');
  controller.supportedLanguages = ['python'];
  controller.supportsExecutionOrder = true;
  controller.description = 'cells run in the failed task\'s frame, in its process';

  async function run(cell, session) {
    const execution = controller.createNotebookCellExecution(cell);
    execution.start(Date.now());
    await execution.clearOutput();
    let ok = false;
    try {
      const answer = await client.execute(session, cell.document.getText());
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

  controller.executeHandler = async (cells) => {
    const session = currentSession();
    for (const cell of cells) {
      if (!session) {
        const execution = controller.createNotebookCellExecution(cell);
        execution.start(Date.now());
        await execution.replaceOutput(failureOutput(vscode, 'no podcode session found'));
        execution.end(false, Date.now());
      } else {
        await run(cell, session);
      }
    }
  };

  controller.interruptHandler = async () => {
    const session = currentSession();
    if (!session) {
      return;
    }
    try {
      const answer = await client.interrupt(session);
      if (answer.body && answer.body.result === 'native') {
        vscode.window.showWarningMessage('podcode: the cell is blocked in native code; it stops when that call returns to Python');
      }
    } catch (err) {
      log(`interrupt failed: ${err.message}`);
    }
  };

  async function open() {
    const session = currentSession();
    if (!session) {
      vscode.window.showErrorMessage('podcode: no session: no failed frame to open a notebook on');
      return;
    }
    try {
      const answer = await client.openNotebook(session);
      if (answer.status !== 200 || !answer.body) {
        vscode.window.showErrorMessage(`podcode: no notebook: ${answerError(answer)}`);
        return;
      }
      controller.label = answer.body.label;
      const document = await vscode.workspace.openNotebookDocument(vscode.Uri.file(answer.body.path));
      controller.updateNotebookAffinity(document, vscode.NotebookControllerAffinity.Preferred);
      await vscode.window.showNotebookDocument(document);
      await vscode.commands.executeCommand('notebook.selectKernel',
        { id: CONTROLLER_ID, extension: context.extension.id });
    } catch (err) {
      vscode.window.showErrorMessage(`podcode: could not open the notebook: ${err.message}`);
    }
  }

  const item = vscode.window.createStatusBarItem('podcode.notebook', vscode.StatusBarAlignment.Left, 99);
  item.name = 'podcode notebook';
  item.text = '$(notebook) notebook';
  item.tooltip = 'podcode: Open notebook on the failure (its cells run in the failed frame)';
  item.command = 'podcode.openNotebook';
  context.subscriptions.push(controller, item,
    vscode.commands.registerCommand('podcode.openNotebook', open));
  return { open, controller, item };
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

module.exports = { register, cellOutputs, showWhile, CONTROLLER_ID };
