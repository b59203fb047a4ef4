"""Definition documents of the API tests (no code: CEL and inline schemas only)."""

PURCHASE = """
definitionId: api-purchase
definitionVersion: {version}
contract:
  name: api-purchase.v1
  signals:
    paid: {{type: object, properties: {{amount: {{type: number}}}}, required: [amount]}}
stateSchema: {{type: object}}
startPayloadSchema:
  type: object
  properties: {{number: {{type: string, maxLength: 20}}, total: {{type: number}}}}
  required: [number, total]
initialStep: wait-payment
steps:
  - id: wait-payment
    type: wait-signal
    signal: paid
    set: "{{'paid': payload.amount}}"
    next: review
  - id: review
    type: human-task
    title: "Approve purchase {{{{ state.number }}}}"
    assignment: {{mode: group, value: approvers}}
    decisions:
      - name: approve
        payloadSchema:
          type: object
          properties: {{comment: {{type: string, maxLength: 50}}}}
        next: done
      - name: reject
        next: rejected
  - id: done
    type: complete
  - id: rejected
    type: fail
    errorType: rejected
"""


def purchase(version: int = 1) -> str:
    return PURCHASE.format(version=version)


OTHER_CONTRACT = """
definitionId: api-purchase
definitionVersion: 9
contract:
  name: something-else.v1
  signals: {}
stateSchema: {type: object}
initialStep: done
steps:
  - id: done
    type: complete
"""
