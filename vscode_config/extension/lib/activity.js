// Which debug requests a person causes (stepping, evaluating, breakpoints, starting and
// stopping), as opposed to those the IDE sends by itself (threads, stack traces, variables
// after a stop): only the former count as activity, so an attached debugger that nobody
// looks at lets an abandoned session be cleaned up.
'use strict';

const PERSON_REQUESTS = new Set([
  'attach', 'launch', 'restart', 'disconnect', 'terminate',
  'continue', 'next', 'stepIn', 'stepOut', 'stepBack', 'reverseContinue', 'pause',
  'restartFrame', 'goto', 'setVariable', 'setExpression', 'completions',
  'setBreakpoints', 'setFunctionBreakpoints', 'setExceptionBreakpoints',
  'setDataBreakpoints', 'setInstructionBreakpoints',
]);

function isPersonRequest(message) {
  if (!message || message.type !== 'request') {
    return false;
  }
  if (message.command === 'evaluate') {
    const context = message.arguments && message.arguments.context;
    return context !== 'watch' && context !== 'variables';
  }
  return PERSON_REQUESTS.has(message.command);
}

module.exports = { isPersonRequest, PERSON_REQUESTS };
