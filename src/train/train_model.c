/* A small decoder-only transformer (GPT-2 layout, pre-LayerNorm), forward and
 * backward by hand. Every sum runs in a fixed order that depends only on the
 * shapes: dot products through dck_dot (8 lanes), matrix products as
 * y = b + x0 w0 + x1 w1 + ... in input order, gradient accumulation over
 * tokens in token order and over sequences in sequence order. One thread
 * owns one microbatch, so the bits never depend on thread count.
 *
 * Weights are stored [in, out] (as GPT-2's Conv1D) so the forward product
 * and the weight gradient vectorise across the output without reordering
 * any sum. In bf16 mode the forward pass sees bf16-rounded weights and
 * rounds every activation to bf16 (round-to-nearest-even); accumulation,
 * logits, loss and gradients stay fp32. */
#include "train/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void add_param(dck_model *m, const char *name, int ndim, uint64_t d0, uint64_t d1,
                      bool decay, float std, float value) {
    dck_param *p = &m->params[m->nparams++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = ndim > 1 ? d1 : 0;
    p->numel = (size_t)d0 * (ndim > 1 ? (size_t)d1 : 1);
    p->row = ndim > 1 ? (size_t)d1 : 1;
    p->offset = m->total;
    p->decay = decay;
    p->init_std = std;
    p->init_value = value;
    m->total += p->numel;
}

dck_status dck_model_init(dck_model *m, const dck_train_config *cfg) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    size_t n = 5 + (size_t)BP_COUNT * (size_t)cfg->layers;
    m->params = dck_xcalloc(n, sizeof *m->params);
    if (!m->params) return dck_oom("train");
    uint64_t V = (uint64_t)cfg->vocab, S = (uint64_t)cfg->seq, d = (uint64_t)cfg->width;
    float std = 0.02f;
    float std_out = 0.02f / sqrtf(2.0f * (float)cfg->layers);
    char name[96];
    m->i_wte = m->nparams;
    add_param(m, "model.wte.weight", 2, V, d, true, std, 0);
    m->i_wpe = m->nparams;
    add_param(m, "model.wpe.weight", 2, S, d, true, std, 0);
    m->i_block0 = m->nparams;
    for (int l = 0; l < cfg->layers; l++) {
#define P(suffix, nd, a, b, dec, sd, val)                                    \
    snprintf(name, sizeof name, "model.blocks.%d.%s", l, suffix);              \
    add_param(m, name, nd, a, b, dec, sd, val)
        P("ln1.weight", 1, d, 0, false, 0, 1.0f);
        P("ln1.bias", 1, d, 0, false, 0, 0.0f);
        P("attn.qkv.weight", 2, d, 3 * d, true, std, 0);
        P("attn.qkv.bias", 1, 3 * d, 0, false, 0, 0.0f);
        P("attn.proj.weight", 2, d, d, true, std_out, 0);
        P("attn.proj.bias", 1, d, 0, false, 0, 0.0f);
        P("ln2.weight", 1, d, 0, false, 0, 1.0f);
        P("ln2.bias", 1, d, 0, false, 0, 0.0f);
        P("mlp.fc.weight", 2, d, 4 * d, true, std, 0);
        P("mlp.fc.bias", 1, 4 * d, 0, false, 0, 0.0f);
        P("mlp.proj.weight", 2, 4 * d, d, true, std_out, 0);
        P("mlp.proj.bias", 1, d, 0, false, 0, 0.0f);
#undef P
    }
    m->i_lnf_w = m->nparams;
    add_param(m, "model.ln_f.weight", 1, d, 0, false, 0, 1.0f);
    m->i_lnf_b = m->nparams;
    add_param(m, "model.ln_f.bias", 1, d, 0, false, 0, 0.0f);
    m->i_head = m->nparams;
    add_param(m, "model.lm_head.weight", 2, d, V, true, std, 0);
    return DCK_OK;
}

void dck_model_release(dck_model *m) {
    if (!m) return;
    free(m->params);
    m->params = NULL;
    m->nparams = 0;
}

long dck_model_find(const dck_model *m, const char *name) {
    for (size_t i = 0; i < m->nparams; i++)
        if (!strcmp(m->params[i].name, name)) return (long)i;
    return -1;
}

void dck_model_init_weights(const dck_model *m, float *master) {
    for (size_t t = 0; t < m->nparams; t++) {
        const dck_param *p = &m->params[t];
        float *w = master + p->offset;
        if (p->init_std == 0.0f) {
            for (size_t e = 0; e < p->numel; e++) w[e] = p->init_value;
            continue;
        }
        /* uniform with the given standard deviation: (2u - 1) sqrt(3) std */
        float a = p->init_std * 1.7320508075688772f;
        for (size_t e = 0; e < p->numel; e++) {
            uint32_t u = dck_philox_u32(m->cfg.seed, (uint32_t)t, (uint32_t)e,
                                        (uint32_t)((uint64_t)e >> 32), 0x1417u);
            float x = (float)(u >> 8) * (1.0f / 16777216.0f);
            w[e] = (x * 2.0f - 1.0f) * a;
        }
    }
}

/* ------------------------------------------------------------------ workspace */

typedef struct {
    float *x_in, *ln1, *mean1, *rstd1, *qkv, *probs, *att, *x_mid, *ln2, *mean2, *rstd2, *fc, *gel;
} layer_cache;

struct dck_workspace {
    int S, d, H, F, V, L;
    layer_cache *lc;
    float *x_fin, *lnf, *meanf, *rstdf, *logits;
    float *dx, *dtmp, *dqkv, *datt, *dfc, *dln, *tmp, *row;
    float *block; /* one allocation for everything above */
};

dck_workspace *dck_workspace_create(const dck_model *m) {
    const dck_train_config *c = &m->cfg;
    dck_workspace *w = dck_xcalloc(1, sizeof *w);
    if (!w) return NULL;
    w->S = c->seq;
    w->d = c->width;
    w->H = c->heads;
    w->F = 4 * c->width;
    w->V = c->vocab;
    w->L = c->layers;
    size_t S = (size_t)w->S, d = (size_t)w->d, H = (size_t)w->H, F = (size_t)w->F,
           V = (size_t)w->V;
    size_t wide = V > F ? V : F; /* F = 4d > d */
    size_t rowlen = S > wide ? S : wide;
    size_t per_layer = S * d * 5 + S * 4 + S * 3 * d + H * S * S + S * F * 2;
    size_t total = per_layer * (size_t)w->L + S * d * 2 + S * 2 + S * V /* final */
                   + S * d * 4 + S * 3 * d + S * F + S * wide + rowlen /* scratch */;
    w->lc = dck_xcalloc((size_t)w->L, sizeof *w->lc);
    w->block = dck_xcalloc(total, sizeof(float));
    if (!w->lc || !w->block) {
        dck_workspace_free(w);
        return NULL;
    }
    float *p = w->block;
#define TAKE(ptr, n) (ptr = p, p += (n))
    for (int l = 0; l < w->L; l++) {
        layer_cache *lc = &w->lc[l];
        TAKE(lc->x_in, S * d);
        TAKE(lc->ln1, S * d);
        TAKE(lc->mean1, S);
        TAKE(lc->rstd1, S);
        TAKE(lc->qkv, S * 3 * d);
        TAKE(lc->probs, H * S * S);
        TAKE(lc->att, S * d);
        TAKE(lc->x_mid, S * d);
        TAKE(lc->ln2, S * d);
        TAKE(lc->mean2, S);
        TAKE(lc->rstd2, S);
        TAKE(lc->fc, S * F);
        TAKE(lc->gel, S * F);
    }
    TAKE(w->x_fin, S * d);
    TAKE(w->lnf, S * d);
    TAKE(w->meanf, S);
    TAKE(w->rstdf, S);
    TAKE(w->logits, S * V);
    TAKE(w->dx, S * d);
    TAKE(w->dtmp, S * d);
    TAKE(w->datt, S * d);
    TAKE(w->dln, S * d);
    TAKE(w->dqkv, S * 3 * d);
    TAKE(w->dfc, S * F);
    TAKE(w->tmp, S * wide);
    TAKE(w->row, rowlen);
#undef TAKE
    return w;
}

void dck_workspace_free(dck_workspace *w) {
    if (!w) return;
    free(w->lc);
    free(w->block);
    free(w);
}

/* ------------------------------------------------------------------ kernels */

static void round_bf16(float *x, size_t n, bool bf16) {
    if (!bf16) return;
    for (size_t i = 0; i < n; i++) x[i] = dck_bf16_round(x[i]);
}

/* Y[t] = b + sum_i X[t][i] W[i], i ascending. */
static void linear_fwd(const float *X, size_t S, size_t in, size_t out, const float *W,
                       const float *b, float *Y) {
    for (size_t t = 0; t < S; t++) {
        float *y = Y + t * out;
        const float *x = X + t * in;
        if (b)
            memcpy(y, b, out * sizeof(float));
        else
            memset(y, 0, out * sizeof(float));
        for (size_t i = 0; i < in; i++) {
            float xi = x[i];
            const float *w = W + i * out;
            for (size_t o = 0; o < out; o++) y[o] += xi * w[o];
        }
    }
}

/* dX = dY W^T (dot products), dW += X^T dY and db += dY in token order. */
static void linear_bwd(const float *dY, const float *X, size_t S, size_t in, size_t out,
                       const float *W, float *dW, float *db, float *dX) {
    for (size_t t = 0; t < S; t++) {
        const float *dy = dY + t * out;
        const float *x = X + t * in;
        if (dX)
            for (size_t i = 0; i < in; i++) dX[t * in + i] = dck_dot(dy, W + i * out, out);
        for (size_t i = 0; i < in; i++) {
            float xi = x[i];
            float *dw = dW + i * out;
            for (size_t o = 0; o < out; o++) dw[o] += xi * dy[o];
        }
        if (db)
            for (size_t o = 0; o < out; o++) db[o] += dy[o];
    }
}

#define LN_EPS 1e-5f

static void layernorm_fwd(const float *X, size_t S, size_t d, const float *w, const float *b,
                          float *Y, float *mean, float *rstd, float *tmp, bool bf16) {
    float inv_d = 1.0f / (float)d;
    for (size_t t = 0; t < S; t++) {
        const float *x = X + t * d;
        float mu = dck_sum(x, d) * inv_d;
        for (size_t c = 0; c < d; c++) tmp[c] = x[c] - mu;
        float var = dck_dot(tmp, tmp, d) * inv_d;
        float rs = 1.0f / sqrtf(var + LN_EPS);
        float *y = Y + t * d;
        for (size_t c = 0; c < d; c++) y[c] = (tmp[c] * rs) * w[c] + b[c];
        mean[t] = mu;
        rstd[t] = rs;
    }
    round_bf16(Y, S * d, bf16);
}

/* dX = (or +=, with accumulate) the input gradient; dw, db accumulate. */
static void layernorm_bwd(const float *dY, const float *X, size_t S, size_t d, const float *w,
                          const float *mean, const float *rstd, float *dw, float *db, float *dX,
                          bool accumulate, float *xhat, float *dxhat) {
    float inv_d = 1.0f / (float)d;
    for (size_t t = 0; t < S; t++) {
        const float *x = X + t * d;
        const float *dy = dY + t * d;
        float rs = rstd[t];
        for (size_t c = 0; c < d; c++) {
            xhat[c] = (x[c] - mean[t]) * rs;
            dxhat[c] = dy[c] * w[c];
            dw[c] += dy[c] * xhat[c];
            db[c] += dy[c];
        }
        float m1 = dck_sum(dxhat, d) * inv_d;
        float m2 = dck_dot(dxhat, xhat, d) * inv_d;
        float *dx = dX + t * d;
        for (size_t c = 0; c < d; c++) {
            float g = rs * ((dxhat[c] - m1) - xhat[c] * m2);
            dx[c] = accumulate ? dx[c] + g : g;
        }
    }
}

static void attention_fwd(const float *qkv, size_t S, size_t d, size_t H, float *probs,
                          float *out, float *srow, bool bf16) {
    size_t hd = d / H, d3 = 3 * d;
    float scale = 1.0f / sqrtf((float)hd);
    for (size_t h = 0; h < H; h++) {
        for (size_t i = 0; i < S; i++) {
            const float *q = qkv + i * d3 + h * hd;
            float mx = -3.0e38f;
            for (size_t j = 0; j <= i; j++) {
                srow[j] = dck_dot(q, qkv + j * d3 + d + h * hd, hd) * scale;
                if (srow[j] > mx) mx = srow[j];
            }
            float sum = 0.0f;
            for (size_t j = 0; j <= i; j++) {
                srow[j] = dck_expf(srow[j] - mx);
                sum += srow[j];
            }
            float *p = probs + (h * S + i) * S;
            for (size_t j = 0; j <= i; j++) p[j] = srow[j] / sum;
            float *o = out + i * d + h * hd;
            for (size_t c = 0; c < hd; c++) o[c] = 0.0f;
            for (size_t j = 0; j <= i; j++) {
                const float *v = qkv + j * d3 + 2 * d + h * hd;
                float pj = p[j];
                for (size_t c = 0; c < hd; c++) o[c] += pj * v[c];
            }
        }
    }
    round_bf16(out, S * d, bf16);
}

static void attention_bwd(const float *dout, const float *qkv, const float *probs, size_t S,
                          size_t d, size_t H, float *dqkv, float *dp) {
    size_t hd = d / H, d3 = 3 * d;
    float scale = 1.0f / sqrtf((float)hd);
    memset(dqkv, 0, S * d3 * sizeof(float));
    for (size_t h = 0; h < H; h++) {
        for (size_t i = 0; i < S; i++) {
            const float *g = dout + i * d + h * hd;
            const float *p = probs + (h * S + i) * S;
            const float *q = qkv + i * d3 + h * hd;
            float *dq = dqkv + i * d3 + h * hd;
            float sum_pd = 0.0f;
            for (size_t j = 0; j <= i; j++) {
                const float *v = qkv + j * d3 + 2 * d + h * hd;
                float *dv = dqkv + j * d3 + 2 * d + h * hd;
                dp[j] = dck_dot(g, v, hd);
                float pj = p[j];
                for (size_t c = 0; c < hd; c++) dv[c] += pj * g[c];
                sum_pd += pj * dp[j];
            }
            for (size_t j = 0; j <= i; j++) {
                float ds = (p[j] * (dp[j] - sum_pd)) * scale;
                const float *k = qkv + j * d3 + d + h * hd;
                float *dk = dqkv + j * d3 + d + h * hd;
                for (size_t c = 0; c < hd; c++) {
                    dq[c] += ds * k[c];
                    dk[c] += ds * q[c];
                }
            }
        }
    }
}

/* ------------------------------------------------------------------ one microbatch */

static const float *P(const dck_model *m, const float *w, size_t i) {
    return w + m->params[i].offset;
}
static float *G(const dck_model *m, float *g, size_t i) { return g + m->params[i].offset; }

/* Forward and backward of one sequence; returns its summed token loss. */
static float sequence(const dck_model *m, dck_workspace *ws, const float *w,
                      const uint16_t *tok, float *grad, float inv_ntok) {
    size_t S = (size_t)ws->S, d = (size_t)ws->d, H = (size_t)ws->H, F = (size_t)ws->F,
           V = (size_t)ws->V;
    bool bf16 = m->cfg.precision == DCK_PREC_BF16;
    const float *wte = P(m, w, m->i_wte), *wpe = P(m, w, m->i_wpe);
    float *x = ws->lc[0].x_in;
    if (ws->L == 0) x = ws->x_fin;
    for (size_t t = 0; t < S; t++)
        for (size_t c = 0; c < d; c++) x[t * d + c] = wte[(size_t)tok[t] * d + c] + wpe[t * d + c];
    round_bf16(x, S * d, bf16);

    for (int l = 0; l < ws->L; l++) {
        layer_cache *lc = &ws->lc[l];
        size_t b = m->i_block0 + (size_t)l * BP_COUNT;
        float *next = l + 1 < ws->L ? ws->lc[l + 1].x_in : ws->x_fin;
        layernorm_fwd(lc->x_in, S, d, P(m, w, b + BP_LN1_W), P(m, w, b + BP_LN1_B), lc->ln1,
                      lc->mean1, lc->rstd1, ws->row, bf16);
        linear_fwd(lc->ln1, S, d, 3 * d, P(m, w, b + BP_QKV_W), P(m, w, b + BP_QKV_B), lc->qkv);
        round_bf16(lc->qkv, S * 3 * d, bf16);
        attention_fwd(lc->qkv, S, d, H, lc->probs, lc->att, ws->row, bf16);
        linear_fwd(lc->att, S, d, d, P(m, w, b + BP_PROJ_W), P(m, w, b + BP_PROJ_B), ws->tmp);
        round_bf16(ws->tmp, S * d, bf16);
        for (size_t i = 0; i < S * d; i++) lc->x_mid[i] = lc->x_in[i] + ws->tmp[i];
        round_bf16(lc->x_mid, S * d, bf16);
        layernorm_fwd(lc->x_mid, S, d, P(m, w, b + BP_LN2_W), P(m, w, b + BP_LN2_B), lc->ln2,
                      lc->mean2, lc->rstd2, ws->row, bf16);
        linear_fwd(lc->ln2, S, d, F, P(m, w, b + BP_FC_W), P(m, w, b + BP_FC_B), lc->fc);
        round_bf16(lc->fc, S * F, bf16);
        for (size_t i = 0; i < S * F; i++) lc->gel[i] = dck_gelu(lc->fc[i]);
        round_bf16(lc->gel, S * F, bf16);
        linear_fwd(lc->gel, S, F, d, P(m, w, b + BP_FC2_W), P(m, w, b + BP_FC2_B), ws->tmp);
        round_bf16(ws->tmp, S * d, bf16);
        for (size_t i = 0; i < S * d; i++) next[i] = lc->x_mid[i] + ws->tmp[i];
        round_bf16(next, S * d, bf16);
    }
    layernorm_fwd(ws->x_fin, S, d, P(m, w, m->i_lnf_w), P(m, w, m->i_lnf_b), ws->lnf, ws->meanf,
                  ws->rstdf, ws->row, bf16);
    linear_fwd(ws->lnf, S, d, V, P(m, w, m->i_head), NULL, ws->logits);

    /* cross-entropy; logits become d loss / d logits in place */
    float loss = 0.0f;
    for (size_t t = 0; t < S; t++) {
        float *lg = ws->logits + t * V;
        float mx = lg[0];
        for (size_t v = 1; v < V; v++)
            if (lg[v] > mx) mx = lg[v];
        float sum = 0.0f;
        for (size_t v = 0; v < V; v++) {
            ws->tmp[v] = dck_expf(lg[v] - mx);
            sum += ws->tmp[v];
        }
        size_t target = tok[t + 1];
        float lse = mx + dck_logf(sum);
        loss += lse - lg[target];
        for (size_t v = 0; v < V; v++) lg[v] = (ws->tmp[v] / sum) * inv_ntok;
        lg[target] -= inv_ntok;
    }

    /* backward */
    float *dx = ws->dx;
    linear_bwd(ws->logits, ws->lnf, S, d, V, P(m, w, m->i_head), G(m, grad, m->i_head), NULL,
               ws->dln);
    layernorm_bwd(ws->dln, ws->x_fin, S, d, P(m, w, m->i_lnf_w), ws->meanf, ws->rstdf,
                  G(m, grad, m->i_lnf_w), G(m, grad, m->i_lnf_b), dx, false, ws->row, ws->tmp);
    for (int l = ws->L - 1; l >= 0; l--) {
        layer_cache *lc = &ws->lc[l];
        size_t b = m->i_block0 + (size_t)l * BP_COUNT;
        /* next = x_mid + fc2(gelu(fc(ln2(x_mid)))) */
        linear_bwd(dx, lc->gel, S, F, d, P(m, w, b + BP_FC2_W), G(m, grad, b + BP_FC2_W),
                   G(m, grad, b + BP_FC2_B), ws->dfc);
        for (size_t i = 0; i < S * F; i++) ws->dfc[i] = ws->dfc[i] * dck_gelu_grad(lc->fc[i]);
        linear_bwd(ws->dfc, lc->ln2, S, d, F, P(m, w, b + BP_FC_W), G(m, grad, b + BP_FC_W),
                   G(m, grad, b + BP_FC_B), ws->dln);
        layernorm_bwd(ws->dln, lc->x_mid, S, d, P(m, w, b + BP_LN2_W), lc->mean2, lc->rstd2,
                      G(m, grad, b + BP_LN2_W), G(m, grad, b + BP_LN2_B), dx, true, ws->row,
                      ws->tmp);
        /* x_mid = x_in + proj(attn(qkv(ln1(x_in)))) */
        linear_bwd(dx, lc->att, S, d, d, P(m, w, b + BP_PROJ_W), G(m, grad, b + BP_PROJ_W),
                   G(m, grad, b + BP_PROJ_B), ws->datt);
        attention_bwd(ws->datt, lc->qkv, lc->probs, S, d, H, ws->dqkv, ws->row);
        linear_bwd(ws->dqkv, lc->ln1, S, d, 3 * d, P(m, w, b + BP_QKV_W),
                   G(m, grad, b + BP_QKV_W), G(m, grad, b + BP_QKV_B), ws->dln);
        layernorm_bwd(ws->dln, lc->x_in, S, d, P(m, w, b + BP_LN1_W), lc->mean1, lc->rstd1,
                      G(m, grad, b + BP_LN1_W), G(m, grad, b + BP_LN1_B), dx, true, ws->row,
                      ws->tmp);
    }
    float *dwte = G(m, grad, m->i_wte), *dwpe = G(m, grad, m->i_wpe);
    for (size_t t = 0; t < S; t++) {
        float *a = dwte + (size_t)tok[t] * d, *p = dwpe + t * d;
        const float *g = dx + t * d;
        for (size_t c = 0; c < d; c++) {
            a[c] += g[c];
            p[c] += g[c];
        }
    }
    return loss;
}

float dck_model_microbatch(const dck_model *m, dck_workspace *ws, const float *w,
                           const uint16_t *tokens, float *grad) {
    size_t B = (size_t)m->cfg.batch, S = (size_t)m->cfg.seq;
    memset(grad, 0, m->total * sizeof(float));
    float inv_ntok = 1.0f / (float)(B * S);
    float loss = 0.0f;
    for (size_t s = 0; s < B; s++) loss += sequence(m, ws, w, tokens + s * (S + 1), grad, inv_ntok);
    return loss / (float)(B * S);
}
