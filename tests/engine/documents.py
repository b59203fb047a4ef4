"""Definition documents used by the engine tests (no-code: CEL and inline schemas)."""

ORDER_SIGNAL = """
definitionId: order-signal
definitionVersion: 1
contract:
  name: order.v1
  signals:
    paid: {type: object, properties: {amount: {type: number}}, required: [amount]}
    cancelled: null
stateSchema: {type: object}
startPayloadSchema:
  type: object
  properties: {order: {type: string, maxLength: 20}}
  required: [order]
initialState: "{'order': payload.order, 'paid': 0.0}"
initialStep: reserve
steps:
  - id: reserve
    type: service
    target: test.reserve
    next: wait-payment
  - id: wait-payment
    type: wait-signal
    signal: paid
    set: "{'paid': payload.amount}"
    next: done
    timeout:
      after: PT1H
      next: expired
  - id: done
    type: complete
  - id: expired
    type: fail
    errorType: payment-timeout
"""

APPROVAL = """
definitionId: approval
definitionVersion: 1
contract:
  name: approval.v1
  signals: {}
stateSchema: {type: object}
startPayloadSchema:
  type: object
  properties: {number: {type: string}, total: {type: number}}
  required: [number, total]
initialStep: route
steps:
  - id: route
    type: decision
    routes:
      - when: "state.total > 1000"
        to: review
    default: done
  - id: review
    type: human-task
    title: "Approve purchase {{ state.number }}"
    assignment: {mode: group, value: approvers}
    decisions:
      - name: approve
        payloadSchema:
          type: object
          properties: {comment: {type: string, maxLength: 50}}
        set: "{'approved': true}"
        next: done
      - name: reject
        next: rejected
  - id: done
    type: complete
  - id: rejected
    type: fail
    errorType: rejected
"""


def gated(definition_id: str, condition: str) -> str:
    """A decision whose condition is a test callback (``test.block_while_gate`` holds the
    worker, ``test.exit_while_gate`` kills it) while a gate file exists, then a wait for ``go``."""
    return f"""
definitionId: {definition_id}
definitionVersion: 1
contract: {{name: {definition_id}.v1, signals: {{go: null}}}}
stateSchema: {{type: object}}
startPayloadSchema: {{type: object}}
initialStep: check
steps:
  - id: check
    type: decision
    routes:
      - condition: {condition}
        to: wait-go
    default: wait-go
  - id: wait-go
    type: wait-signal
    signal: go
    next: done
  - id: done
    type: complete
"""
